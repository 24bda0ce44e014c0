package slotsync

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/changesink/changesink/tasks/cdc/pgvalue"
	"github.com/changesink/changesink/tasks/cdc/slot"
)

// sourceTable is a published table as the source's catalog describes it:
// the columns the publication publishes, in the table's order, each with
// its type and whether it is NOT NULL or part of the key.
type sourceTable struct {
	schema, name string
	oid          uint32
	identity     byte // pg_class.relreplident
	cols         []pgvalue.Column
	// attnums are cols' attribute numbers, which a rename keeps.
	attnums []int16
	// generated names the STORED generated columns pgoutput does not send,
	// left out of cols.
	generated []string
	// listed: the publication publishes a column list of the table (a
	// column added to the list later holds values the stream never sent).
	listed bool
	// pubrel is the table's row of the publication (pg_publication_rel's
	// oid; 0 when a FOR ALL TABLES or FOR TABLES IN SCHEMA publication
	// publishes it): another one says it left the publication and came
	// back, and the changes between are not in the stream.
	pubrel uint32
}

func (t sourceTable) qualified() string { return t.schema + "." + t.name }

// catalogSQL lists the columns of the tables of %s (pg_publication_tables,
// or a relation with its columns pubname, schemaname, tablename and
// attnames). The key is the replica identity's index (REPLICA IDENTITY
// USING INDEX), else the primary key: under REPLICA IDENTITY FULL,
// pgoutput flags every column, and the target's key is still the primary
// key.
const catalogSQL = `
SELECT n.nspname, c.relname, c.oid::int8, c.relreplident::text,
       a.attname, a.atttypid::int8, a.atttypmod, a.attnotnull, format_type(a.atttypid, a.atttypmod),
       COALESCE(a.attnum = ANY ((SELECT i.indkey FROM pg_catalog.pg_index i
                                  WHERE i.indrelid = c.oid AND (i.indisreplident OR (c.relreplident <> 'i' AND i.indisprimary))
                                  ORDER BY i.indisreplident DESC LIMIT 1)::int2[]), false),
       a.attnum, a.attgenerated <> '',
       EXISTS (SELECT 1 FROM pg_catalog.pg_publication_rel pr JOIN pg_catalog.pg_publication pb ON pb.oid = pr.prpubid
                WHERE pb.pubname = p.pubname AND pr.prrelid = c.oid AND pr.prattrs IS NOT NULL),
       COALESCE((SELECT pr.oid FROM pg_catalog.pg_publication_rel pr JOIN pg_catalog.pg_publication pb ON pb.oid = pr.prpubid
                  WHERE pb.pubname = p.pubname AND pr.prrelid = c.oid), 0)::int8
  FROM %s p
  JOIN pg_catalog.pg_namespace n ON n.nspname = p.schemaname
  JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = p.tablename
  JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
 WHERE p.pubname = $1 AND (p.attnames IS NULL OR a.attname = ANY (p.attnames))
 ORDER BY n.nspname, c.relname, a.attnum`

// namedTables is what catalogSQL reads for cdc check: the publication's
// tables ($1) and the tables named ($2, $3: schemas and names) it does not
// publish yet, as setup will publish them: every column, and a
// partitioned table by its leaf partitions (publish_via_partition_root
// is refused).
const namedTables = `(SELECT pubname, schemaname, tablename, attnames FROM pg_catalog.pg_publication_tables WHERE pubname = $1
   UNION ALL
   SELECT $1::name, ln.nspname, l.relname, NULL::name[]
     FROM unnest($2::text[], $3::text[]) AS q(nsp, rel)
     JOIN pg_catalog.pg_namespace n ON n.nspname = q.nsp
     JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = q.rel AND c.relkind IN ('r', 'p')
     CROSS JOIN LATERAL (SELECT c.oid AS relid WHERE c.relkind = 'r'
                         UNION ALL
                         SELECT t.relid FROM pg_catalog.pg_partition_tree(c.oid) t WHERE t.isleaf AND c.relkind = 'p') AS leaf
     JOIN pg_catalog.pg_class l ON l.oid = leaf.relid
     JOIN pg_catalog.pg_namespace ln ON ln.oid = l.relnamespace
    WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_publication_tables pt
                       WHERE pt.pubname = $1 AND pt.schemaname = ln.nspname AND pt.tablename = l.relname))`

// readCatalog returns the tables the publication publishes, in name order.
func readCatalog(ctx context.Context, conn *pgx.Conn, publication string) ([]sourceTable, error) {
	return queryCatalog(ctx, conn, fmt.Sprintf(catalogSQL, "pg_catalog.pg_publication_tables"), publication)
}

// readNamedCatalog returns the tables the publication publishes and those
// of tables it does not publish yet, in name order: what setup will
// publish. A table that does not exist is not among them.
func readNamedCatalog(ctx context.Context, conn *pgx.Conn, publication string, tables []slot.Table) ([]sourceTable, error) {
	schemas, names := make([]string, len(tables)), make([]string, len(tables))
	for i, t := range tables {
		schemas[i], names[i] = t.Schema, t.Name
	}
	return queryCatalog(ctx, conn, fmt.Sprintf(catalogSQL, namedTables), publication, schemas, names)
}

// queryCatalog runs sql, a catalogSQL, and reads its rows into tables.
func queryCatalog(ctx context.Context, conn *pgx.Conn, sql, publication string, args ...any) ([]sourceTable, error) {
	rows, err := conn.Query(ctx, sql, append([]any{publication}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("read the columns of publication %s: %w", publication, err)
	}
	defer rows.Close()
	var out []sourceTable
	for rows.Next() {
		var schema, name, identity string
		var oid, typeOID int64
		var c pgvalue.Column
		var attnum int16
		var listed bool
		var pubrel int64
		if err := rows.Scan(&schema, &name, &oid, &identity, &c.Name, &typeOID, &c.TypeMod, &c.NotNull, &c.TypeName, &c.Key,
			&attnum, &c.Generated, &listed, &pubrel); err != nil {
			return nil, fmt.Errorf("read the columns of publication %s: %w", publication, err)
		}
		c.TypeOID = uint32(typeOID)
		if n := len(out); n == 0 || out[n-1].schema != schema || out[n-1].name != name {
			out = append(out, sourceTable{schema: schema, name: name, oid: uint32(oid), identity: identity[0], listed: listed, pubrel: uint32(pubrel)})
		}
		t := &out[len(out)-1]
		if c.Generated {
			// pgoutput sends no generated column (PostgreSQL 18 can, with
			// publish_generated_columns, which changesink does not ask
			// for): left out of the table's columns, and of its mapping
			// (mapTable notes it, or refuses an entry that names one).
			t.generated = append(t.generated, c.Name)
			continue
		}
		t.cols = append(t.cols, c)
		t.attnums = append(t.attnums, attnum)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the columns of publication %s: %w", publication, err)
	}
	return out, nil
}

// pubRelSQL reads the publication's table rows: table OID, row oid.
const pubRelSQL = `SELECT pr.prrelid::int8, pr.oid::int8 FROM pg_catalog.pg_publication_rel pr
  JOIN pg_catalog.pg_publication pb ON pb.oid = pr.prpubid WHERE pb.pubname = $1`

// readPubRels returns the publication's row of each table it lists by
// name (pubrel), by table OID.
func readPubRels(ctx context.Context, conn *pgx.Conn, publication string) (map[uint32]uint32, error) {
	rows, err := conn.Query(ctx, pubRelSQL, publication)
	if err != nil {
		return nil, fmt.Errorf("read the tables of publication %s: %w", publication, err)
	}
	out := map[uint32]uint32{}
	var rel, row int64
	_, err = pgx.ForEachRow(rows, []any{&rel, &row}, func() error {
		out[uint32(rel)] = uint32(row)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the tables of publication %s: %w", publication, err)
	}
	return out, nil
}

// systemIdentity returns the source's system identifier and database: what
// tells one PostgreSQL cluster from another (a restore or a migration makes
// another), which the sync ledger records.
func systemIdentity(ctx context.Context, conn *pgx.Conn) (id, db string, err error) {
	err = conn.QueryRow(ctx, `SELECT system_identifier::text, current_database() FROM pg_catalog.pg_control_system()`).Scan(&id, &db)
	if err != nil {
		return "", "", fmt.Errorf("read the source's system identifier: %w", err)
	}
	return id, db, nil
}
