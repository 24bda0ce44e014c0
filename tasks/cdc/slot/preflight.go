package slot

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Preflight is what Check found: every refusal Ensure would meet, at once
// (Problems, each the error Ensure returns for it, with its class and
// remedy), and what an operator should know though Ensure goes on
// (Notes: a slot nobody reads holding WAL, no limit on what a slot may
// hold, transactions a new slot waits for, a WAL sender not free now).
type Preflight struct {
	Version  string // the server's server_version
	User     string
	Problems []error
	Notes    []string
	// toAdd are the tables that exist and that the publication, when it
	// stands, does not list yet: setup adds them (ALTER PUBLICATION … ADD
	// TABLE, which its owner may run).
	toAdd []string
}

func (p *Preflight) problem(err error) { p.Problems = append(p.Problems, err) }

func (p *Preflight) note(format string, args ...any) {
	p.Notes = append(p.Notes, fmt.Sprintf(format, args...))
}

// Check reads over conn, a plain connection to the source's database
// (pgx users pass conn.PgConn()), which it leaves open, and changes
// nothing: what Ensure(s) would check and create, every problem at once,
// not the first. Its error is a failure to read (a lost connection), not
// a problem found.
func Check(ctx context.Context, conn *pgconn.PgConn, s Setup) (Preflight, error) {
	var p Preflight
	if err := s.validate(); err != nil {
		p.problem(err)
		return p, nil
	}
	srv, err := readServer(ctx, conn)
	if err != nil {
		return p, err
	}
	p.User = srv.user
	if srv.walLevel != "logical" {
		p.problem(configErr(fmt.Errorf("%w (it is %s)", ErrWALLevel, srv.walLevel)))
	}
	if !srv.canReplicate {
		p.problem(configErr(fmt.Errorf("role %s: %w", srv.user, ErrNoReplication)))
	}
	steps := []func(context.Context, *pgconn.PgConn, Setup, server, *Preflight) error{
		checkVersion, preflightTables, preflightPublication, preflightSlot, preflightRetention,
	}
	for _, step := range steps {
		if err := step(ctx, conn, s, srv, &p); err != nil {
			return p, err
		}
	}
	return p, nil
}

// checkVersion reads the server's version (pgoutput needs 10).
func checkVersion(ctx context.Context, conn *pgconn.PgConn, _ Setup, _ server, p *Preflight) error {
	rows, err := simpleQuery(ctx, conn, `SELECT current_setting('server_version'), current_setting('server_version_num')`)
	if err != nil || len(rows) != 1 {
		return fmt.Errorf("read the server's version: %w", err)
	}
	p.Version = string(rows[0][0])
	if n, _ := strconv.Atoi(string(rows[0][1])); n < 100000 {
		p.problem(configErr(fmt.Errorf("%w: PostgreSQL %s has no pgoutput (10 or later)", ErrConfig, p.Version)))
	}
	return nil
}

// preflightTablesSQL is, for each table of a list, whether it exists as a
// table, whether the role may read it and owns it (adding it to a
// publication needs the owner), and whether the publication lists it
// already (by itself, or every leaf partition of it).
const preflightTablesSQL = `SELECT q.nsp, q.rel, c.oid IS NOT NULL,
       COALESCE(pg_catalog.has_schema_privilege(n.oid, 'USAGE') AND pg_catalog.has_table_privilege(c.oid, 'SELECT'), false),
       COALESCE(pg_catalog.pg_has_role(c.relowner, 'USAGE'), false),
       COALESCE(pg_catalog.pg_get_userbyid(c.relowner)::text, ''),
       EXISTS (SELECT 1 FROM pg_catalog.pg_publication_tables p
                WHERE p.pubname = %[2]s AND p.schemaname = q.nsp AND p.tablename = q.rel)
       OR (c.relkind = 'p' AND NOT EXISTS (
            SELECT 1 FROM pg_catalog.pg_partition_tree(c.oid) t JOIN pg_catalog.pg_class l ON l.oid = t.relid
              JOIN pg_catalog.pg_namespace ln ON ln.oid = l.relnamespace
             WHERE t.isleaf AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_publication_tables p
                    WHERE p.pubname = %[2]s AND p.schemaname = ln.nspname AND p.tablename = l.relname)))
  FROM unnest(%[1]s) AS q(nsp, rel)
  LEFT JOIN pg_catalog.pg_namespace n ON n.nspname = q.nsp
  LEFT JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = q.rel AND c.relkind IN ('r', 'p')
 ORDER BY 1, 2`

// preflightTables checks every table asked for: it exists, the role may
// read it (the load's COPY) and, when the publication does not list it
// yet, owns it (setup adds it); and every replica identity.
func preflightTables(ctx context.Context, conn *pgconn.PgConn, s Setup, srv server, p *Preflight) error {
	if len(s.Tables) == 0 {
		return nil
	}
	rows, err := simpleQuery(ctx, conn, fmt.Sprintf(preflightTablesSQL, tableList(s.Tables), quoteLiteral(s.Publication)))
	if err != nil {
		return fmt.Errorf("publication %s: read the tables: %w", s.Publication, err)
	}
	var found []Table
	for _, r := range rows {
		t := Table{string(r[0]), string(r[1])}
		switch {
		case string(r[2]) != "t":
			p.problem(configErr(&TableError{Table: t.String(), Err: ErrNoTable}))
			continue
		case string(r[3]) != "t":
			p.problem(configErr(&TableError{Table: t.String(), Detail: "role " + srv.user + ": SELECT on it, or USAGE on its schema",
				Err: ErrNoSelect}))
		}
		if string(r[6]) != "t" && !s.AllTables {
			p.toAdd = append(p.toAdd, t.String())
			if string(r[4]) != "t" {
				p.problem(configErr(&TableError{Table: t.String(), Publication: s.Publication,
					Detail: fmt.Sprintf("owned by %s, not by role %s", string(r[5]), srv.user), Err: ErrNotOwner}))
			}
		}
		found = append(found, t)
	}
	if len(found) == 0 {
		return nil
	}
	rows, err = simpleQuery(ctx, conn, fmt.Sprintf(identitySQL, tableList(found)))
	if err != nil {
		return fmt.Errorf("publication %s: read replica identities: %w", s.Publication, err)
	}
	for _, r := range rows {
		t := PublishedTable{Table: Table{string(r[0]), string(r[1])}}
		if len(r[2]) == 1 {
			t.Identity = r[2][0]
		}
		if detail := identityProblem(t.Identity, string(r[3]) == "t", string(r[4]) == "t"); detail != "" {
			p.problem(refused(&TableError{Table: t.String(), Identity: t.Identity, Detail: detail, Err: ErrReplicaIdentity}))
		}
	}
	return nil
}

// preflightPublication checks the publication as ensurePublication would
// find it: one that stands publishes every operation, not via the
// partitions' root, the kind of table list asked for, no row filter; one
// that is missing, the role may create (CREATE on the database).
func preflightPublication(ctx context.Context, conn *pgconn.PgConn, s Setup, _ server, p *Preflight) error {
	rows, err := simpleQuery(ctx, conn, `SELECT puballtables, pubinsert AND pubupdate AND pubdelete AND pubtruncate, pubviaroot,
			pg_catalog.has_database_privilege(current_database(), 'CREATE'), pg_catalog.pg_has_role(pubowner, 'USAGE'),
			pg_catalog.pg_get_userbyid(pubowner)
		FROM pg_catalog.pg_publication WHERE pubname = `+quoteLiteral(s.Publication)+`
		UNION ALL SELECT NULL, NULL, NULL, pg_catalog.has_database_privilege(current_database(), 'CREATE'), NULL, NULL
		WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_publication WHERE pubname = `+quoteLiteral(s.Publication)+`)`)
	if err != nil || len(rows) != 1 {
		return fmt.Errorf("publication %s: read: %w", s.Publication, err)
	}
	r := rows[0]
	if r[0] == nil {
		if string(r[3]) != "t" {
			p.problem(configErr(fmt.Errorf("publication %s: create: %w", s.Publication, ErrNoCreate)))
		}
		return nil
	}
	if string(r[2]) == "t" {
		p.problem(refused(fmt.Errorf("publication %s: %w", s.Publication, ErrPublicationViaRoot)))
	}
	if len(p.toAdd) > 0 && string(r[4]) != "t" {
		p.problem(configErr(fmt.Errorf("publication %s (owned by %s, not by role %s): add %s: %w", s.Publication, r[5], p.User,
			strings.Join(p.toAdd, ", "), ErrPublicationNotOwned)))
	}
	if string(r[1]) != "t" {
		p.problem(refused(fmt.Errorf("publication %s: %w", s.Publication, ErrPublicationActions)))
	}
	if allTables := string(r[0]) == "t"; allTables != s.AllTables {
		what := "FOR ALL TABLES, where a table list was asked"
		if s.AllTables {
			what = "a table list, where FOR ALL TABLES was asked"
		}
		p.problem(refused(fmt.Errorf("publication %s: %w: it is %s", s.Publication, ErrPublicationTables, what)))
	}
	filtered, err := simpleQuery(ctx, conn, `SELECT schemaname, tablename FROM pg_catalog.pg_publication_tables
		WHERE pubname = `+quoteLiteral(s.Publication)+` AND rowfilter IS NOT NULL ORDER BY 1, 2`)
	if err != nil {
		return fmt.Errorf("publication %s: read its tables: %w", s.Publication, err)
	}
	for _, f := range filtered {
		p.problem(refused(&TableError{Table: Table{string(f[0]), string(f[1])}.String(), Publication: s.Publication,
			Detail: "a WHERE clause", Err: ErrPublicationFilter}))
	}
	listed, err := simpleQuery(ctx, conn, `SELECT pt.schemaname, pt.tablename, array_to_string(pt.attnames, ', ')
		FROM pg_catalog.pg_publication_tables pt
		JOIN pg_catalog.pg_namespace n ON n.nspname = pt.schemaname
		JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename
		WHERE pt.pubname = `+quoteLiteral(s.Publication)+`
		  AND cardinality(pt.attnames) < (SELECT count(*) FROM pg_catalog.pg_attribute a
		                                   WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = '')
		ORDER BY 1, 2`)
	if err != nil {
		return fmt.Errorf("publication %s: read its column lists: %w", s.Publication, err)
	}
	for _, l := range listed {
		p.note("publication %s publishes only columns %s of table %s.%s (a column list): its target has only those, and a column "+
			"added to the list later holds the table until a resync", s.Publication, l[2], l[0], l[1])
	}
	return nil
}

// preflightSlot checks the slot as ensureSlot would find it: one that
// stands is this database's pgoutput slot with its WAL, made after its
// publication; one that is missing has room, and the transactions its
// creation would wait for are named.
func preflightSlot(ctx context.Context, conn *pgconn.PgConn, s Setup, srv server, p *Preflight) error {
	h, err := ReadHealth(ctx, conn, s.Slot)
	switch {
	case errors.Is(err, ErrSlotMissing):
		return preflightNewSlot(ctx, conn, s, srv, p)
	case err != nil:
		return err
	}
	switch err := h.refusal(); {
	case errors.Is(err, ErrSlotActive):
		p.note("slot %s is streamed by pid %d now: setup waits for it to let go", s.Slot, h.ActivePID)
	case err != nil:
		p.problem(err)
	}
	if err := checkPublications(ctx, conn, []string{s.Publication}); errors.Is(err, ErrPublicationMissing) {
		p.problem(refused(&SlotError{Slot: s.Slot, Err: fmt.Errorf("%w (%s)", ErrSlotWithoutPublication, s.Publication)}))
	} else if err != nil && !isRefusal(err) {
		return err
	}
	return nil
}

// isRefusal: err is a finding of the publication's (checked above), not a
// failure to read it.
func isRefusal(err error) bool {
	return errors.Is(err, ErrPublicationActions) || errors.Is(err, ErrPublicationViaRoot) || errors.Is(err, ErrPublicationTables)
}

// preflightNewSlot checks what creating the slot needs: a free slot (a
// free WAL sender is a note: one may free up) and no transaction to wait
// for (each one named, as setup would while it waits).
func preflightNewSlot(ctx context.Context, conn *pgconn.PgConn, s Setup, srv server, p *Preflight) error {
	if srv.slots >= srv.maxSlots {
		p.problem(configErr(fmt.Errorf("slot %s: create: %w: %d of %d in use", s.Slot, ErrNoSlotRoom, srv.slots, srv.maxSlots)))
	}
	if srv.senders >= srv.maxSenders {
		p.note("every WAL sender is busy now (%d of %d, max_wal_senders): setup's slot needs one", srv.senders, srv.maxSenders)
	}
	ws, seesAll, err := readWaits(ctx, conn)
	if err != nil {
		return err
	}
	var named []string
	for _, w := range ws {
		if !w.prepared && w.age < longTransaction {
			continue // a short one ends before anyone notices the wait
		}
		if len(named) == waitsShown {
			named = append(named, "more")
			break
		}
		if w.prepared {
			named = append(named, fmt.Sprintf("prepared transaction %q (%s, database %s: COMMIT PREPARED or ROLLBACK PREPARED ends it)", w.who, w.age, w.db))
		} else {
			named = append(named, fmt.Sprintf("pid %s (%s, open %s, database %s)", w.who, orUnknown(w.state), w.age, w.db))
		}
	}
	if len(named) > 0 {
		p.note("creating slot %s waits for the transactions open then to end: now %s", s.Slot, strings.Join(named, ", "))
	}
	if !seesAll {
		p.note("role %s does not see other roles' sessions (pg_read_all_stats shows them): a transaction setup would wait for may be hidden", srv.user)
	}
	return nil
}

// longTransaction is the age from which Check names a running
// transaction a new slot would wait for.
const longTransaction = 5 * time.Second

// retentionSQL is max_slot_wal_keep_size ("" before PostgreSQL 13) and
// the slots nobody streams from that hold WAL, largest first.
const retentionSQL = `SELECT 'limit', COALESCE(current_setting('max_slot_wal_keep_size', true), ''), 0::int8
UNION ALL
SELECT s.slot_name::text, COALESCE(s.database::text, ''), pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_current_wal_lsn(), s.restart_lsn)::int8
  FROM pg_catalog.pg_replication_slots s
 WHERE NOT s.active AND s.restart_lsn IS NOT NULL AND s.slot_name <> %s`

// preflightRetention notes what may fill the source's disk: no limit on
// the WAL a slot holds, and the slots nobody reads (another tool's, or an
// earlier experiment's), each with the WAL it holds.
func preflightRetention(ctx context.Context, conn *pgconn.PgConn, s Setup, _ server, p *Preflight) error {
	rows, err := simpleQuery(ctx, conn, fmt.Sprintf(retentionSQL, quoteLiteral(s.Slot)))
	if err != nil {
		return fmt.Errorf("read the slots' retained WAL: %w", err)
	}
	for _, r := range rows {
		if string(r[0]) == "limit" {
			if string(r[1]) == "-1" {
				p.note("max_slot_wal_keep_size is -1 (no limit): a slot nobody reads keeps WAL until the disk is full; " +
					"set it to what the disk can spare (a slot past it is lost, and setup loads its tables again)")
			}
			continue
		}
		held, _ := strconv.ParseInt(string(r[2]), 10, 64)
		db := string(r[1])
		if db == "" {
			db = "none: a physical slot"
		}
		p.note("slot %s (database %s) is not read by anyone and holds %s of WAL: drop it if nothing will read it "+
			"(SELECT pg_drop_replication_slot('%s'))", r[0], db, bytesText(held), r[0])
	}
	return nil
}

// bytesText is n bytes in the largest binary unit that keeps it ≥ 1.
func bytesText(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
