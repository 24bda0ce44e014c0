package pgvalue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/changesink/changesink/internal/testenv"
	"github.com/changesink/changesink/tasks/cdc/mapping"
)

// catalogSQL is cdc's query of the published tables' columns
// (tasks/cdc/catalog.go) with the column OmitGenerated needs last: whether
// the column is generated (pg_attribute.attgenerated is not empty).
const catalogSQL = `
SELECT n.nspname, c.relname,
       a.attname, a.atttypid::int8, a.atttypmod, a.attnotnull, format_type(a.atttypid, a.atttypmod),
       COALESCE(a.attnum = ANY ((SELECT i.indkey FROM pg_catalog.pg_index i
                                  WHERE i.indrelid = c.oid AND (i.indisreplident OR (c.relreplident <> 'i' AND i.indisprimary))
                                  ORDER BY i.indisreplident DESC LIMIT 1)::int2[]), false),
       a.attgenerated <> ''
  FROM pg_catalog.pg_publication_tables p
  JOIN pg_catalog.pg_namespace n ON n.nspname = p.schemaname
  JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = p.tablename
  JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
 WHERE p.pubname = $1 AND (p.attnames IS NULL OR a.attname = ANY (p.attnames))
 ORDER BY n.nspname, c.relname, a.attnum`

// readColumns returns the columns of each published table of pub, by
// schema.table, as cdc's catalog query reads them.
func readColumns(t *testing.T, ctx context.Context, conn *pgx.Conn, pub string) map[string][]Column {
	t.Helper()
	rows, err := conn.Query(ctx, catalogSQL, pub)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][]Column{}
	for rows.Next() {
		var schema, table string
		var oid int64
		var c Column
		if err := rows.Scan(&schema, &table, &c.Name, &oid, &c.TypeMod, &c.NotNull, &c.TypeName, &c.Key, &c.Generated); err != nil {
			t.Fatal(err)
		}
		c.TypeOID = uint32(oid)
		out[schema+"."+table] = append(out[schema+"."+table], c)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// mapFromCatalog maps the table as cdc sync does: its columns from the
// catalog, the generated ones left out (the stream does not carry them),
// each mapped by the set's entry when it names it, else generated; then
// CheckNullable.
func mapFromCatalog(set *mapping.Set, table string, cols []Column) (*mapping.Mapping, string, error) {
	schema, name, _ := strings.Cut(table, ".")
	cols, note, err := OmitGenerated(table, cols, false, func(c string) bool { _, ok := set.Column(schema, name, c); return ok })
	if err != nil {
		return nil, note, err
	}
	var mcs []mapping.Column
	var key []string
	for _, c := range cols {
		mc, ok := set.Column(schema, name, c.Name)
		if !ok {
			if mc, err = Generate(table, c, capsNew); err != nil {
				return nil, note, err
			}
		}
		mcs = append(mcs, mc)
		if c.Key {
			key = append(key, c.Name)
		}
	}
	m, err := set.For("d", schema, name, mcs, key)
	if err != nil {
		return nil, note, err
	}
	return m, note, CheckNullable(table, cols, m)
}

// TestCatalogNullableAndGenerated: on the real server, under cdc's
// catalog query, a column that allows NULL is generated Nullable (a key
// column, NOT NULL or of a USING INDEX identity, is not), a type with no
// generated mapping asks for Nullable(String), and an entry's String for
// it is refused; a STORED generated column, which pgoutput leaves out of
// the Relation message and every tuple, is left out of the mapping with a
// note, and an entry naming it refused; a table under REPLICA IDENTITY
// FULL without a primary key is refused for its missing key, and mapped
// with an entry's key. A NULL streamed into the generated mapping reads
// as NULL.
func TestCatalogNullableAndGenerated(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := testenv.Lookup(t, "CHANGESINK_TEST_PG")["CHANGESINK_TEST_PG"]
	dsn := testenv.CreateDatabaseWith(t, admin, testenv.UniqueName(t, "pgv_"), testenv.DatabaseOptions{})
	exec(t, ctx, dsn, nil,
		`CREATE TABLE t (id int PRIMARY KEY, a int, b text NOT NULL, p point, amount numeric(12,2),
		   twice int GENERATED ALWAYS AS (a * 2) STORED, at timestamptz)`,
		`CREATE TABLE u (k int NOT NULL, v text)`, `CREATE UNIQUE INDEX u_k ON u (k)`, `ALTER TABLE u REPLICA IDENTITY USING INDEX u_k`,
		`CREATE TABLE f (k int NOT NULL, v text)`, `ALTER TABLE f REPLICA IDENTITY FULL`,
		`CREATE PUBLICATION p FOR TABLE t, u, f`)
	conn := connect(t, ctx, dsn, Settings())
	defer conn.Close(ctx)
	var version int
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
		t.Fatal(err)
	}
	catalog := readColumns(t, ctx, conn, "p")
	if i := slices.IndexFunc(catalog["public.t"], func(c Column) bool { return c.Name == "twice" }); i >= 0 {
		if !catalog["public.t"][i].Generated {
			t.Errorf("twice: the catalog does not say it is generated: %+v", catalog["public.t"][i])
		}
	} else if version < 180000 {
		t.Errorf("PostgreSQL %d: the publication's columns leave out the generated column: %+v", version, catalog["public.t"])
	}

	const defaults = "defaults: {source: {database: d, schema: public}}\n"
	types := func(m *mapping.Mapping) string {
		var out []string
		for _, c := range m.Columns {
			out = append(out, c.Name+" "+c.Type)
		}
		return strings.Join(out, ", ") + " key " + m.KeyNames()
	}
	for _, tt := range []struct {
		name, table, entries string
		want                 string // the mapping's columns and key, or the error's text
		is                   error
	}{
		{"a type with no generated mapping", "public.t", "", `column "p" (point): no generated mapping for the column's type; map it to Nullable(String) in a mapping entry`,
			ErrUnsupportedType},
		{"String for a column that allows NULL", "public.t", "tables: [{source: {table: t}, columns: [{name: p, type: String}]}]\n",
			`column "p" (point): the mapping does not fit the source column's type: the source column allows NULL; the mapping's String cannot hold it: map it as Nullable(String)`,
			ErrNullable},
		{"Nullable(String)", "public.t", "tables: [{source: {table: t}, columns: [{name: p, type: Nullable(String)}]}]\n",
			"id Int32, a Nullable(Int32), b String, p Nullable(String), amount Nullable(Decimal(12, 2)), at Nullable(DateTime64(6, 'UTC')) key id", nil},
		{"an entry naming the generated column", "public.t",
			"tables: [{source: {table: t}, columns: [{name: p, type: Nullable(String)}, {name: twice, type: Nullable(Int32)}]}]\n",
			`table public.t, column "twice" (integer): pgoutput does not stream the generated column`, ErrGeneratedColumn},
		{"a USING INDEX identity", "public.u", "", "k Int32, v Nullable(String) key k", nil},
		{"REPLICA IDENTITY FULL without a primary key", "public.f", "",
			"table public.f has no primary key to order its target by (REPLICA IDENTITY FULL names no key), so key is required", mapping.ErrNoKey},
		{"REPLICA IDENTITY FULL with an entry's key", "public.f", "tables: [{source: {table: f}, key: [k]}]\n", "k Int32, v Nullable(String) key k", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			set, err := mapping.ParseSet("s.yaml", []byte(defaults+tt.entries))
			if err != nil {
				t.Fatal(err)
			}
			m, note, err := mapFromCatalog(set, tt.table, catalog[tt.table])
			if tt.is != nil {
				if !errors.Is(err, tt.is) || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("error\n got %v\nwant %v saying %s", err, tt.is, tt.want)
				}
				return
			}
			if err != nil || types(m) != tt.want {
				t.Errorf("mapping\n got %v (%v)\nwant %s", types(m), err, tt.want)
			}
			if generated := tt.table == "public.t"; generated != strings.Contains(note, `generated column "twice" left out of its target`) {
				t.Errorf("note %q", note)
			}
		})
	}

	// The stream: the Relation and the insert leave the generated column
	// out (before 18, and on 18 from a publication that does not publish
	// them), and a NULL of a column that allows NULL reads as NULL in the
	// generated mapping.
	set, err := mapping.ParseSet("s.yaml", []byte(defaults+"tables: [{source: {table: t}, columns: [{name: p, type: Nullable(String)}]}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := mapFromCatalog(set, "public.t", catalog["public.t"])
	if err != nil {
		t.Fatal(err)
	}
	rel, ins := streamChange(t, ctx, dsn, "p", `INSERT INTO t (id, a, b) VALUES (1, NULL, 'x')`)
	var names []string
	for _, c := range rel.Columns {
		names = append(names, c.Name)
	}
	if got := strings.Join(names, ","); got != "id,a,b,p,amount,at" {
		t.Errorf("the Relation's columns: %s, want the table's without the generated one", got)
	}
	for i, c := range rel.Columns {
		j := m.ByName[c.Name]
		d, err := NewDecoder(Column{Name: c.Name, TypeOID: c.DataType, TypeMod: c.TypeModifier}, &m.Cols[j])
		if err != nil {
			t.Fatal(err)
		}
		v, err := d.Value(ins.Tuple.Columns[i].DataType, ins.Tuple.Columns[i].Data)
		if wantNull := c.Name != "id" && c.Name != "b"; err != nil || v.Null != wantNull {
			t.Errorf("%s (%s): %+v, %v; want NULL %v", c.Name, m.Cols[j].Type, v, err, wantNull)
		}
	}
}

// streamChange creates a temporary pgoutput slot of publication pub,
// runs sql (one insert) through another connection and returns the
// Relation and the Insert pgoutput streams for it.
func streamChange(t *testing.T, ctx context.Context, dsn, pub, sql string) (*pglogrepl.RelationMessage, *pglogrepl.InsertMessage) {
	t.Helper()
	conn, _ := replicationConn(t, ctx, dsn, Settings())
	slot := "pgv_" + testenv.RandomHex(6)
	if _, err := pglogrepl.CreateReplicationSlot(ctx, conn, slot, "pgoutput", pglogrepl.CreateReplicationSlotOptions{Temporary: true}); err != nil {
		t.Fatalf("create the slot: %v", err)
	}
	exec(t, ctx, dsn, Settings(), sql)
	err := pglogrepl.StartReplication(ctx, conn, slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", fmt.Sprintf("publication_names '%s'", pub)}})
	if err != nil {
		t.Fatalf("start replication: %v", err)
	}
	var rel *pglogrepl.RelationMessage
	for {
		msg, err := conn.ReceiveMessage(ctx)
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		cd, ok := msg.(*pgproto3.CopyData)
		if !ok || len(cd.Data) == 0 || cd.Data[0] != pglogrepl.XLogDataByteID {
			continue
		}
		x, err := pglogrepl.ParseXLogData(cd.Data[1:])
		if err != nil {
			t.Fatal(err)
		}
		m, err := pglogrepl.Parse(x.WALData)
		if err != nil {
			t.Fatal(err)
		}
		switch m := m.(type) {
		case *pglogrepl.RelationMessage:
			rel = m
		case *pglogrepl.InsertMessage:
			if rel == nil {
				t.Fatal("an Insert before its Relation")
			}
			return rel, m
		}
	}
}
