package slot

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// server is what Ensure checks of the server and the role.
type server struct {
	walLevel     string
	canReplicate bool // REPLICATION or SUPERUSER
	user         string
	maxSlots     int
	slots        int
	maxSenders   int
	senders      int
}

const serverSQL = `SELECT current_setting('wal_level'), r.rolreplication OR r.rolsuper, current_user,
       current_setting('max_replication_slots'), (SELECT count(*) FROM pg_catalog.pg_replication_slots),
       current_setting('max_wal_senders'),
       (SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE backend_type = 'walsender')
  FROM pg_catalog.pg_roles r WHERE r.rolname = current_user`

func readServer(ctx context.Context, conn *pgconn.PgConn) (server, error) {
	rows, err := simpleQuery(ctx, conn, serverSQL)
	if err != nil {
		return server{}, fmt.Errorf("read the server's settings: %w", err)
	}
	if len(rows) != 1 {
		return server{}, fmt.Errorf("read the server's settings: %d rows for the current role", len(rows))
	}
	r := rows[0]
	s := server{walLevel: string(r[0]), canReplicate: string(r[1]) == "t", user: string(r[2])}
	var errs [4]error
	s.maxSlots, errs[0] = strconv.Atoi(string(r[3]))
	s.slots, errs[1] = strconv.Atoi(string(r[4]))
	s.maxSenders, errs[2] = strconv.Atoi(string(r[5]))
	s.senders, errs[3] = strconv.Atoi(string(r[6]))
	for _, err := range errs {
		if err != nil {
			return s, fmt.Errorf("read the server's settings: %w", err)
		}
	}
	return s, nil
}

// check refuses a server that cannot decode (wal_level) and a role that
// may not replicate.
func (s server) check() error {
	if s.walLevel != "logical" {
		return configErr(fmt.Errorf("%w (it is %s)", ErrWALLevel, s.walLevel))
	}
	if !s.canReplicate {
		return configErr(fmt.Errorf("role %s: %w", s.user, ErrNoReplication))
	}
	return nil
}

// checkRoom refuses to create a slot when the server has no slot or WAL
// sender to spare.
func (s server) checkRoom(slot string) error {
	if s.slots >= s.maxSlots {
		return configErr(fmt.Errorf("slot %s: create: %w: %d of %d in use", slot, ErrNoSlotRoom, s.slots, s.maxSlots))
	}
	if s.senders >= s.maxSenders {
		return transient(fmt.Errorf("slot %s: create: %w: %d of %d in use", slot, ErrNoSenderRoom, s.senders, s.maxSenders))
	}
	return nil
}

// tableList renders tables as the two text arrays unnest takes.
func tableList(tables []Table) string {
	schemas := make([]string, len(tables))
	names := make([]string, len(tables))
	for i, t := range tables {
		schemas[i], names[i] = quoteLiteral(t.Schema), quoteLiteral(t.Name)
	}
	return "ARRAY[" + strings.Join(schemas, ", ") + "]::text[], ARRAY[" + strings.Join(names, ", ") + "]::text[]"
}

// identitySQL lists, for each table of a list (a partitioned one by its
// leaf partitions, where the rows are), its replica identity and whether
// the primary key or identity index it needs exists.
const identitySQL = `SELECT ln.nspname, l.relname, l.relreplident,
       EXISTS (SELECT 1 FROM pg_catalog.pg_index i WHERE i.indrelid = l.oid AND i.indisprimary),
       EXISTS (SELECT 1 FROM pg_catalog.pg_index i WHERE i.indrelid = l.oid AND i.indisreplident)
  FROM unnest(%s) AS q(nsp, rel)
  JOIN pg_catalog.pg_namespace n ON n.nspname = q.nsp
  JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = q.rel AND c.relkind IN ('r', 'p')
  CROSS JOIN LATERAL (SELECT c.oid AS relid WHERE c.relkind = 'r'
                      UNION ALL
                      SELECT t.relid FROM pg_catalog.pg_partition_tree(c.oid) t WHERE t.isleaf AND c.relkind = 'p') AS leaf
  JOIN pg_catalog.pg_class l ON l.oid = leaf.relid
  JOIN pg_catalog.pg_namespace ln ON ln.oid = l.relnamespace
 ORDER BY 1, 2`

// checkTables refuses tables that do not exist (or are not tables) and
// tables without a usable replica identity.
func checkTables(ctx context.Context, conn *pgconn.PgConn, pub string, tables []Table) error {
	if len(tables) == 0 {
		return nil
	}
	rows, err := simpleQuery(ctx, conn, `SELECT q.nsp, q.rel FROM unnest(`+tableList(tables)+`) AS q(nsp, rel)
		WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		                   WHERE n.nspname = q.nsp AND c.relname = q.rel AND c.relkind IN ('r', 'p'))`)
	if err != nil {
		return fmt.Errorf("publication %s: read the tables: %w", pub, err)
	}
	if len(rows) > 0 {
		return configErr(&TableError{Table: Table{string(rows[0][0]), string(rows[0][1])}.String(), Err: ErrNoTable})
	}
	_, err = identities(ctx, conn, pub, tables)
	return err
}

// identities returns each table's (leaf partitions') replica identity,
// refusing one that is not usable.
func identities(ctx context.Context, conn *pgconn.PgConn, pub string, tables []Table) ([]PublishedTable, error) {
	rows, err := simpleQuery(ctx, conn, fmt.Sprintf(identitySQL, tableList(tables)))
	if err != nil {
		return nil, fmt.Errorf("publication %s: read replica identities: %w", pub, err)
	}
	out := make([]PublishedTable, 0, len(rows))
	for _, r := range rows {
		t := PublishedTable{Table: Table{string(r[0]), string(r[1])}}
		if len(r[2]) == 1 {
			t.Identity = r[2][0]
		}
		if detail := identityProblem(t.Identity, string(r[3]) == "t", string(r[4]) == "t"); detail != "" {
			return nil, refused(&TableError{Table: t.String(), Identity: t.Identity, Detail: detail, Err: ErrReplicaIdentity})
		}
		out = append(out, t)
	}
	return out, nil
}

// identityProblem says why a replica identity does not identify rows, or
// "" when it does.
func identityProblem(identity byte, hasKey, hasIndex bool) string {
	switch {
	case identity == IdentityNothing:
		return "REPLICA IDENTITY NOTHING"
	case identity == IdentityDefault && !hasKey:
		return "REPLICA IDENTITY DEFAULT without a primary key"
	case identity == IdentityIndex && !hasIndex:
		return "REPLICA IDENTITY USING INDEX of a dropped index"
	case identity != IdentityDefault && identity != IdentityFull && identity != IdentityIndex:
		return fmt.Sprintf("replica identity %q", identity)
	}
	return ""
}

// ensurePublication creates the publication when it is missing, and
// otherwise refuses one that leaves out operations or tables asked for.
func ensurePublication(ctx context.Context, conn *pgconn.PgConn, s Setup) (created bool, added []Table, err error) {
	for {
		rows, err := simpleQuery(ctx, conn, `SELECT puballtables, pubinsert AND pubupdate AND pubdelete AND pubtruncate, pubviaroot
			FROM pg_catalog.pg_publication WHERE pubname = `+quoteLiteral(s.Publication))
		if err != nil {
			return false, nil, fmt.Errorf("publication %s: read: %w", s.Publication, err)
		}
		if len(rows) == 1 && string(rows[0][2]) == "t" {
			return false, nil, refused(fmt.Errorf("publication %s: %w", s.Publication, ErrPublicationViaRoot))
		}
		if len(rows) == 1 {
			added, err := checkPublication(ctx, conn, s, string(rows[0][0]) == "t", string(rows[0][1]) == "t")
			return false, added, err
		}
		sql := "CREATE PUBLICATION " + s.Publication + " FOR ALL TABLES"
		if !s.AllTables {
			names := make([]string, len(s.Tables))
			for i, t := range s.Tables {
				names[i] = t.sql()
			}
			sql = "CREATE PUBLICATION " + s.Publication + " FOR TABLE " + strings.Join(names, ", ")
		}
		_, err = simpleQuery(ctx, conn, sql)
		switch pgCode(err) {
		case "":
			return true, nil, nil
		case pgerrcode.DuplicateObject: // created meanwhile by another setup: check it
			continue
		case pgerrcode.InsufficientPrivilege:
			return false, nil, configErr(fmt.Errorf("publication %s: create: %w", s.Publication, err))
		}
		return false, nil, fmt.Errorf("publication %s: create: %w", s.Publication, err)
	}
}

// checkPublication refuses an existing publication that does not publish
// every operation, or that is FOR ALL TABLES where a list was asked (or
// the reverse); a table of the list it lacks is added to it (ALTER
// PUBLICATION … ADD TABLE: a table joins a running pipeline, and the
// caller loads it) and returned.
func checkPublication(ctx context.Context, conn *pgconn.PgConn, s Setup, allTables, allActions bool) ([]Table, error) {
	if !allActions {
		return nil, refused(fmt.Errorf("publication %s: %w", s.Publication, ErrPublicationActions))
	}
	if allTables != s.AllTables {
		what := "FOR ALL TABLES, where a table list was asked"
		if s.AllTables {
			what = "a table list, where FOR ALL TABLES was asked"
		}
		return nil, refused(fmt.Errorf("publication %s: %w: it is %s", s.Publication, ErrPublicationTables, what))
	}
	if allTables {
		return nil, nil
	}
	// A table is published when it is, or when all its leaf partitions are.
	rows, err := simpleQuery(ctx, conn, `SELECT q.nsp, q.rel FROM unnest(`+tableList(s.Tables)+`) AS q(nsp, rel)
		JOIN pg_catalog.pg_namespace n ON n.nspname = q.nsp
		JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = q.rel
		WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_publication_tables p
		                   WHERE p.pubname = `+quoteLiteral(s.Publication)+` AND p.schemaname = q.nsp AND p.tablename = q.rel)
		  AND (c.relkind <> 'p' OR EXISTS (
		       SELECT 1 FROM pg_catalog.pg_partition_tree(c.oid) t JOIN pg_catalog.pg_class l ON l.oid = t.relid
		         JOIN pg_catalog.pg_namespace ln ON ln.oid = l.relnamespace
		        WHERE t.isleaf AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_publication_tables p
		               WHERE p.pubname = `+quoteLiteral(s.Publication)+` AND p.schemaname = ln.nspname AND p.tablename = l.relname)))`)
	if err != nil {
		return nil, fmt.Errorf("publication %s: read its tables: %w", s.Publication, err)
	}
	var added []Table
	names := make([]string, len(rows))
	for i, r := range rows {
		added = append(added, Table{string(r[0]), string(r[1])})
		names[i] = added[i].sql()
	}
	if len(added) == 0 {
		return nil, nil
	}
	_, err = simpleQuery(ctx, conn, "ALTER PUBLICATION "+s.Publication+" ADD TABLE "+strings.Join(names, ", "))
	switch pgCode(err) {
	case "":
		return added, nil
	case pgerrcode.InsufficientPrivilege:
		return nil, configErr(fmt.Errorf("publication %s: add table %s: %w", s.Publication, added[0], err))
	case pgerrcode.DuplicateObject: // added meanwhile by another setup
		return nil, nil
	}
	return nil, fmt.Errorf("publication %s: add table %s: %w", s.Publication, added[0], err)
}

// publishedTables returns the publication's tables, refusing a row filter
// or a table without a usable replica identity.
func publishedTables(ctx context.Context, conn *pgconn.PgConn, pub string) ([]PublishedTable, error) {
	rows, err := simpleQuery(ctx, conn, `SELECT schemaname, tablename, rowfilter IS NOT NULL
		FROM pg_catalog.pg_publication_tables WHERE pubname = `+quoteLiteral(pub)+` ORDER BY 1, 2`)
	if err != nil {
		return nil, fmt.Errorf("publication %s: read its tables: %w", pub, err)
	}
	tables := make([]Table, 0, len(rows))
	for _, r := range rows {
		t := Table{string(r[0]), string(r[1])}
		if string(r[2]) == "t" {
			return nil, refused(&TableError{Table: t.String(), Publication: pub, Detail: "a WHERE clause",
				Err: ErrPublicationFilter})
		}
		tables = append(tables, t)
	}
	if len(tables) == 0 {
		return nil, nil
	}
	return identities(ctx, conn, pub, tables)
}
