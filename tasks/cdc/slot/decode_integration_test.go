package slot

import (
	"strings"
	"testing"

	"github.com/changesink/changesink/internal/testenv"
)

// TestStreamDecodesEveryKind: every pgoutput message kind, from real
// transactions on the test PostgreSQL, arrives as the event it is, values
// exactly as PostgreSQL's text output writes them: NULL (even where the
// column has a DEFAULT), unchanged TOAST, old keys and old rows by replica
// identity, NaN and ±infinity, TRUNCATE of several tables with its
// options, columns added, dropped and retyped mid-stream, a key change,
// enum types, logical messages and replication origins.
func TestStreamDecodesEveryKind(t *testing.T) {
	src := newSource(t)
	origin := testenv.UniqueName(t, "cs_origin_")
	cases := []struct {
		name   string
		ddl    []string // before the slot
		tables []string
		dml    []string // after the slot, each its own transaction unless it says BEGIN
		txs    int      // transactions to read
		want   []string
	}{
		{
			name:   "insert update delete, identity default",
			ddl:    []string{"CREATE TABLE d (id int PRIMARY KEY, v text)"},
			tables: []string{"d"},
			dml: []string{
				"INSERT INTO d VALUES (1, 'a'), (2, NULL)",
				"UPDATE d SET v = 'b' WHERE id = 1",
				"UPDATE d SET id = 3 WHERE id = 2",
				"DELETE FROM d WHERE id = 1",
			},
			txs: 4,
			want: []string{
				"begin",
				"relation public.d [id 23 key, v 25] identity d",
				"insert public.d (t:1 t:a)",
				"insert public.d (t:2 n)",
				"commit",
				"begin", "update public.d (t:1 t:b)", "commit",
				"begin", "update public.d K(t:2 n) (t:3 n)", "commit",
				"begin", "delete public.d K(t:1 n)", "commit",
			},
		},
		{
			name:   "identity full",
			ddl:    []string{"CREATE TABLE f (id int, v text)", "ALTER TABLE f REPLICA IDENTITY FULL"},
			tables: []string{"f"},
			dml: []string{
				"INSERT INTO f VALUES (1, 'a')",
				"UPDATE f SET v = 'b'",
				"UPDATE f SET id = 2",
				"DELETE FROM f",
			},
			txs: 4,
			want: []string{
				"begin", "relation public.f [id 23 key, v 25 key] identity f", "insert public.f (t:1 t:a)", "commit",
				"begin", "update public.f O(t:1 t:a) (t:1 t:b)", "commit",
				"begin", "update public.f O(t:1 t:b) (t:2 t:b)", "commit",
				"begin", "delete public.f O(t:2 t:b)", "commit",
			},
		},
		{
			name: "identity using index",
			ddl: []string{"CREATE TABLE ix (id int NOT NULL, code text NOT NULL, v text)",
				"CREATE UNIQUE INDEX ix_code ON ix (code)", "ALTER TABLE ix REPLICA IDENTITY USING INDEX ix_code"},
			tables: []string{"ix"},
			dml: []string{
				"INSERT INTO ix VALUES (1, 'c1', 'a')",
				"UPDATE ix SET code = 'c2'",
				"DELETE FROM ix",
			},
			txs: 3,
			want: []string{
				"begin", "relation public.ix [id 23, code 25 key, v 25] identity i", "insert public.ix (t:1 t:c1 t:a)", "commit",
				"begin", "update public.ix K(n t:c1 n) (t:1 t:c2 t:a)", "commit",
				"begin", "delete public.ix K(n t:c2 n)", "commit",
			},
		},
		{
			name: "values: NULL over DEFAULT, NaN, infinities, bytea, jsonb, arrays, text escapes",
			ddl: []string{`CREATE TABLE v (id int PRIMARY KEY, d text DEFAULT 'dflt', n numeric, n2 numeric(6,2),
				ts timestamp, tz timestamptz, b bytea, j jsonb, a int[], f8 float8, dt date)`},
			tables: []string{"v"},
			dml: []string{
				`INSERT INTO v VALUES (1, NULL, 'NaN', 'NaN', 'infinity', '-infinity', '\x00ff', '{"a":1}', '{1,NULL}', 'NaN', 'infinity')`,
				`INSERT INTO v (id) VALUES (2)`,
				`INSERT INTO v VALUES (3, e'tab\there\nnew "q" \\ é', 'Infinity', -1234.5, '-infinity', 'infinity', '', 'null', '{}', '-Infinity', '-infinity')`,
				`UPDATE v SET d = DEFAULT, n = NULL WHERE id = 1`,
			},
			txs: 4,
			want: []string{
				"begin",
				"relation public.v [id 23 key, d 25, n 1700, n2 1700(393222), ts 1114, tz 1184, b 17, j 3802, a 1007, f8 701, dt 1082] identity d",
				`insert public.v (t:1 n t:NaN t:NaN t:infinity t:-infinity t:\x00ff t:{"a": 1} t:{1,NULL} t:NaN t:infinity)`,
				"commit",
				"begin", "insert public.v (t:2 t:dflt n n n n n n n n n)", "commit",
				"begin",
				"insert public.v (t:3 t:tab\there\nnew \"q\" \\ é t:Infinity t:-1234.50 t:-infinity t:infinity t:\\x t:null t:{} t:-Infinity t:-infinity)",
				"commit",
				"begin",
				`update public.v (t:1 t:dflt n t:NaN t:infinity t:-infinity t:\x00ff t:{"a": 1} t:{1,NULL} t:NaN t:infinity)`,
				"commit",
			},
		},
		{
			name: "unchanged TOAST under identity default and full",
			ddl: []string{"CREATE TABLE tst (id int PRIMARY KEY, note text, big text)",
				"ALTER TABLE tst ALTER COLUMN big SET STORAGE EXTERNAL",
				"CREATE TABLE tsf (id int PRIMARY KEY, note text, big text)",
				"ALTER TABLE tsf ALTER COLUMN big SET STORAGE EXTERNAL", "ALTER TABLE tsf REPLICA IDENTITY FULL"},
			tables: []string{"tst", "tsf"},
			dml: []string{
				"INSERT INTO tst VALUES (1, 'a', repeat('x', 10000))",
				"UPDATE tst SET note = 'b'",
				"UPDATE tst SET big = 'small'",
				"INSERT INTO tsf VALUES (1, 'a', repeat('y', 10000))",
				"UPDATE tsf SET note = 'b'",
				"DELETE FROM tst",
			},
			txs: 6,
			want: []string{
				"begin", "relation public.tst [id 23 key, note 25, big 25] identity d", "insert public.tst (t:1 t:a t:<10000 bytes>)", "commit",
				"begin", "update public.tst (t:1 t:b u)", "commit",
				"begin", "update public.tst (t:1 t:b t:small)", "commit",
				"begin", "relation public.tsf [id 23 key, note 25 key, big 25 key] identity f", "insert public.tsf (t:1 t:a t:<10000 bytes>)", "commit",
				"begin", "update public.tsf O(t:1 t:a t:<10000 bytes>) (t:1 t:b u)", "commit",
				"begin", "delete public.tst K(t:1 n n)", "commit",
			},
		},
		{
			name: "truncate of several tables, options",
			ddl: []string{"CREATE TABLE ta (id serial PRIMARY KEY)", "CREATE TABLE tb (id int PRIMARY KEY)",
				"CREATE TABLE tc (id int PRIMARY KEY REFERENCES ta)"},
			tables: []string{"ta", "tb", "tc"},
			dml: []string{
				"INSERT INTO ta DEFAULT VALUES",
				"TRUNCATE ta, tb CASCADE",
				"TRUNCATE tb RESTART IDENTITY",
			},
			txs: 3,
			want: []string{
				"begin", "relation public.ta [id 23 key] identity d", "insert public.ta (t:1)", "commit",
				"begin",
				"relation public.ta [id 23 key] identity d (unchanged)",
				"relation public.tb [id 23 key] identity d",
				"relation public.tc [id 23 key] identity d",
				"truncate public.ta public.tb public.tc options 1",
				"commit",
				"begin", "relation public.tb [id 23 key] identity d (unchanged)", "truncate public.tb options 2", "commit",
			},
		},
		{
			name:   "columns added, dropped, retyped; key changed",
			ddl:    []string{"CREATE TABLE s (id int PRIMARY KEY, v text)"},
			tables: []string{"s"},
			dml: []string{
				"INSERT INTO s VALUES (1, 'a')",
				"ALTER TABLE s ADD COLUMN c int",
				"INSERT INTO s VALUES (2, 'b', 3)",
				"ALTER TABLE s DROP COLUMN v",
				"INSERT INTO s VALUES (3, 4)",
				"ALTER TABLE s ALTER COLUMN c TYPE bigint",
				"INSERT INTO s VALUES (4, 5)",
				"UPDATE s SET c = 0 WHERE c IS NULL",
				"ALTER TABLE s DROP CONSTRAINT s_pkey, ADD PRIMARY KEY (id, c)",
				"INSERT INTO s VALUES (5, 6)",
				"ALTER TABLE s RENAME COLUMN c TO c2",
				"INSERT INTO s VALUES (6, 7)",
				"ALTER TABLE s REPLICA IDENTITY FULL",
				"INSERT INTO s VALUES (7, 8)",
			},
			txs: 8,
			want: []string{
				"begin", "relation public.s [id 23 key, v 25] identity d", "insert public.s (t:1 t:a)", "commit",
				"begin", "relation public.s [id 23 key, v 25, c 23] identity d (+c)", "insert public.s (t:2 t:b t:3)", "commit",
				"begin", "relation public.s [id 23 key, c 23] identity d (-v)", "insert public.s (t:3 t:4)", "commit",
				"begin", "relation public.s [id 23 key, c 20] identity d (~c 23->20)", "insert public.s (t:4 t:5)", "commit",
				"begin", "update public.s (t:1 t:0)", "commit",
				"begin", "relation public.s [id 23 key, c 20 key] identity d (key)", "insert public.s (t:5 t:6)", "commit",
				"begin", "relation public.s [id 23 key, c2 20 key] identity d (+c2 -c key rename?c->c2)", "insert public.s (t:6 t:7)", "commit",
				"begin", "relation public.s [id 23 key, c2 20 key] identity f (identity)", "insert public.s (t:7 t:8)", "commit",
			},
		},
		{
			name:   "enum type, logical messages",
			ddl:    []string{"CREATE TYPE mood AS ENUM ('ok', 'sad')", "CREATE TABLE e (id int PRIMARY KEY, m mood)"},
			tables: []string{"e"},
			dml: []string{
				"BEGIN; INSERT INTO e VALUES (1, 'ok'); SELECT pg_logical_emit_message(true, 'pfx', 'in tx'); COMMIT",
				"SELECT pg_logical_emit_message(false, 'pfx', 'now')",
				"SELECT pg_logical_emit_message(true, 'pfx', 'alone')",
				"INSERT INTO e VALUES (2, 'sad')",
			},
			txs: 3,
			want: []string{
				"begin", "type public.mood", "relation public.e [id 23 key, m user] identity d", "insert public.e (t:1 t:ok)",
				`message transactional pfx "in tx"`, "commit",
				`message non-transactional pfx "now"`,
				"begin", `message transactional pfx "alone"`, "commit",
				"begin", "insert public.e (t:2 t:sad)", "commit",
			},
		},
		{
			name:   "savepoints rolled back, transactions aborted",
			ddl:    []string{"CREATE TABLE sp (id int PRIMARY KEY)"},
			tables: []string{"sp"},
			dml: []string{
				"BEGIN; INSERT INTO sp VALUES (1); SAVEPOINT a; INSERT INTO sp VALUES (2); ROLLBACK TO a; INSERT INTO sp VALUES (3); COMMIT",
				"BEGIN; INSERT INTO sp VALUES (4); ROLLBACK",
				"BEGIN; SAVEPOINT b; INSERT INTO sp VALUES (5); RELEASE b; UPDATE sp SET id = 6 WHERE id = 5; COMMIT",
			},
			txs: 2,
			want: []string{
				"begin", "relation public.sp [id 23 key] identity d", "insert public.sp (t:1)", "insert public.sp (t:3)", "commit",
				"begin", "insert public.sp (t:5)", "update public.sp K(t:5) (t:6)", "commit",
			},
		},
		{
			name:   "replication origin",
			ddl:    []string{"CREATE TABLE o (id int PRIMARY KEY)"},
			tables: []string{"o"},
			dml: []string{
				"SELECT pg_replication_origin_create('" + origin + "')",
				"SELECT pg_replication_origin_session_setup('" + origin + "')",
				"BEGIN; SELECT pg_replication_origin_xact_setup('1/ABCDEF', now()); INSERT INTO o VALUES (1); COMMIT",
				"SELECT pg_replication_origin_session_reset()",
				"SELECT pg_replication_origin_drop('" + origin + "')",
				"INSERT INTO o VALUES (2)",
			},
			txs: 2,
			want: []string{
				"begin", "origin " + origin + " 1/ABCDEF", "relation public.o [id 23 key] identity d", "insert public.o (t:1)", "commit",
				"begin", "insert public.o (t:2)", "commit",
			},
		},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src := &source{t: t, admin: src.admin, dsn: src.dsn, pg: src.pg}
			src.exec(c.ddl...)
			slot := slotName(t)
			pub := slot + "_pub"
			src.setup(slot, pub, c.tables...)
			src.exec(c.dml...)
			st := src.start(slot, pub)
			got := transcript(t, st, c.txs)
			if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Errorf("case %d: got\n\t%s\nwant\n\t%s", i, strings.Join(got, "\n\t"), strings.Join(c.want, "\n\t"))
			}
		})
	}
}
