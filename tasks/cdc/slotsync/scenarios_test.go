package slotsync

import (
	"context"
	"errors"

	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/slot"
)

// breakCase is a scenario of the adversarial review of issue 33: the
// matrix's table t (ddlCreate), set up, then steps: SQL statements (each
// its own transaction; several in one string are one transaction) or
// "round" (the shipped flow: cdc setup, then cdc sync). The scenario ends
// with two rounds; the live view must equal the source after each.
type breakCase struct {
	name  string
	pre   []string // before setup, after ddlCreate
	steps []string
	// source is the source table the live view t_live must equal at
	// the end (t when empty).
	source string
	// entry is a mapping entry for t (configYAML), when not empty.
	entry string
}

const round = "round"

var breakCases = []breakCase{
	{name: "set_default_after_add", steps: []string{
		`ALTER TABLE t ADD COLUMN e int DEFAULT 5`, `ALTER TABLE t ALTER COLUMN e SET DEFAULT 7`, `INSERT INTO t (id) VALUES (500)`}},
	{name: "set_default_after_add_between", steps: []string{round,
		`ALTER TABLE t ADD COLUMN e int DEFAULT 5`, `ALTER TABLE t ALTER COLUMN e SET DEFAULT 7`}},
	{name: "drop_default_after_add_between", steps: []string{round,
		`ALTER TABLE t ADD COLUMN e int DEFAULT 5`, `ALTER TABLE t ALTER COLUMN e DROP DEFAULT`}},
	{name: "drop_readd_other_type", steps: []string{
		`ALTER TABLE t DROP COLUMN d`, `ALTER TABLE t ADD COLUMN d text DEFAULT 'x'`, `UPDATE t SET d = 'y' WHERE id = 3`}},
	{name: "drop_readd_other_type_between", steps: []string{round,
		`ALTER TABLE t DROP COLUMN d`, `ALTER TABLE t ADD COLUMN d text DEFAULT 'x'`}},
	{name: "rename_to_dropped_name", steps: []string{
		`ALTER TABLE t DROP COLUMN b`, `ALTER TABLE t RENAME COLUMN d TO b`, `UPDATE t SET b = -5 WHERE id = 4`}},
	{name: "rename_to_dropped_name_between", steps: []string{round,
		`ALTER TABLE t DROP COLUMN b`, `ALTER TABLE t RENAME COLUMN d TO b`}},
	{name: "swap_names", steps: []string{
		`BEGIN; ALTER TABLE t RENAME COLUMN c TO tmp; ALTER TABLE t RENAME COLUMN d TO c; ALTER TABLE t RENAME COLUMN tmp TO d; COMMIT`,
		`UPDATE t SET c = 77 WHERE id = 5`}},
	{name: "swap_names_between", steps: []string{round,
		`BEGIN; ALTER TABLE t RENAME COLUMN c TO tmp; ALTER TABLE t RENAME COLUMN d TO c; ALTER TABLE t RENAME COLUMN tmp TO d; COMMIT`}},
	{name: "drop_expression", steps: []string{
		`ALTER TABLE t ADD COLUMN g int GENERATED ALWAYS AS (c * 2) STORED`, round,
		`ALTER TABLE t ALTER COLUMN g DROP EXPRESSION`, `UPDATE t SET g = 1 WHERE id = 3`}},
	{name: "drop_expression_between", steps: []string{
		`ALTER TABLE t ADD COLUMN g int GENERATED ALWAYS AS (c * 2) STORED`, round,
		`ALTER TABLE t ALTER COLUMN g DROP EXPRESSION`}},
	{name: "drop_not_null", steps: []string{
		`ALTER TABLE t ALTER COLUMN c DROP NOT NULL`, `UPDATE t SET c = NULL WHERE id = 3`}},
	{name: "drop_not_null_between", steps: []string{round,
		`ALTER TABLE t ALTER COLUMN c DROP NOT NULL`, round, `UPDATE t SET c = NULL WHERE id = 3`}},
	{name: "enum_rename_value", pre: []string{`CREATE TYPE mood AS ENUM ('sad', 'ok')`, `ALTER TABLE t ADD COLUMN m mood DEFAULT 'ok'`},
		entry: "    columns:\n      - {name: m, type: \"Nullable(String)\"}\n",
		steps: []string{round, `ALTER TYPE mood RENAME VALUE 'ok' TO 'fine'`, `UPDATE t SET b = 'z' WHERE id = 3`}},
	{name: "enum_add_value", pre: []string{`CREATE TYPE mood AS ENUM ('sad', 'ok')`, `ALTER TABLE t ADD COLUMN m mood DEFAULT 'ok'`},
		entry: "    columns:\n      - {name: m, type: \"Nullable(String)\"}\n",
		steps: []string{round, `ALTER TYPE mood ADD VALUE 'great'`, `UPDATE t SET m = 'great' WHERE id = 3`}},
	{name: "truncate_and_ddl", steps: []string{
		`BEGIN; TRUNCATE t; ALTER TABLE t ADD COLUMN e int DEFAULT 5; INSERT INTO t (id) VALUES (1), (2); COMMIT`}},
	{name: "ddl_and_truncate", steps: []string{
		`BEGIN; ALTER TABLE t ADD COLUMN e int DEFAULT 5; UPDATE t SET e = 9 WHERE id = 4; TRUNCATE t; INSERT INTO t (id) VALUES (1), (2); COMMIT`}},
	{name: "two_ddl_one_tx", steps: []string{
		`BEGIN; ALTER TABLE t ADD COLUMN e int DEFAULT 5; UPDATE t SET e = 6 WHERE id = 3; ALTER TABLE t ALTER COLUMN e TYPE bigint; UPDATE t SET e = 7 WHERE id = 4; COMMIT`}},
	{name: "replica_identity_full", steps: []string{
		`ALTER TABLE t REPLICA IDENTITY FULL`, `UPDATE t SET b = 'f' WHERE id = 3`, `UPDATE t SET id = 3000 WHERE id = 4`, `DELETE FROM t WHERE id = 5`}},
	{name: "retype_key", steps: []string{
		`ALTER TABLE t ALTER COLUMN id TYPE bigint`, `UPDATE t SET id = 5000000000 WHERE id = 4`, `INSERT INTO t (id) VALUES (6000000000)`}},
	{name: "add_text_special_default", steps: []string{round,
		`ALTER TABLE t ADD COLUMN e text DEFAULT E'a\\b\n\tc''d\u00e9'`}},
	{name: "add_uuid_default", steps: []string{round, `ALTER TABLE t ADD COLUMN e uuid DEFAULT 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'`}},
	{name: "add_jsonb_default", steps: []string{round, `ALTER TABLE t ADD COLUMN e jsonb DEFAULT '{"b": [1, 2], "a": "x"}'`}},
	{name: "add_float_default", steps: []string{round, `ALTER TABLE t ADD COLUMN e float8 DEFAULT 0.1`}},
	{name: "add_date_default", steps: []string{round, `ALTER TABLE t ADD COLUMN e date DEFAULT '2020-02-29'`}},
	{name: "add_bigint_default", steps: []string{round, `ALTER TABLE t ADD COLUMN e bigint DEFAULT -9223372036854775808`}},
	{name: "add_smallint_default", steps: []string{round, `ALTER TABLE t ADD COLUMN e smallint DEFAULT -32768`}},
	{name: "drop_readd_same_type", steps: []string{
		`ALTER TABLE t ADD COLUMN e int DEFAULT 5`, `UPDATE t SET e = 6 WHERE id = 3`, `ALTER TABLE t DROP COLUMN e`, `ALTER TABLE t ADD COLUMN e int DEFAULT 8`}},
	{name: "add_then_drop_same_tx_default", steps: []string{
		`BEGIN; ALTER TABLE t ADD COLUMN e int DEFAULT 5; UPDATE t SET e = 6 WHERE id = 3; ALTER TABLE t DROP COLUMN e; ALTER TABLE t ADD COLUMN e int DEFAULT 8; UPDATE t SET a = 1 WHERE id = 5; COMMIT`}},
	{name: "drop_readd_same_type_round", steps: []string{
		`ALTER TABLE t ADD COLUMN e int DEFAULT 5`, `UPDATE t SET e = 6 WHERE id = 3`, round, `ALTER TABLE t DROP COLUMN e`, `ALTER TABLE t ADD COLUMN e int DEFAULT 8`}},
	{name: "drop_readd_d_same_type", steps: []string{round, `ALTER TABLE t DROP COLUMN d`, `ALTER TABLE t ADD COLUMN d int`}},
	{name: "drop_readd_d_same_type_change", steps: []string{round, `ALTER TABLE t DROP COLUMN d`, `ALTER TABLE t ADD COLUMN d int`, `UPDATE t SET b = 'q' WHERE id = 2`}},
	{name: "rename_swap_ab", steps: []string{round,
		`BEGIN; ALTER TABLE t RENAME COLUMN a TO tmp; ALTER TABLE t RENAME COLUMN d TO a; ALTER TABLE t RENAME COLUMN tmp TO d; COMMIT`, `UPDATE t SET b = 'q' WHERE id = 2`}},
	{name: "entry_column_dropped_then_resync", entry: "    columns:\n      - {name: d, type: \"Nullable(Int64)\"}\n",
		steps: []string{`ALTER TABLE t DROP COLUMN d`, `UPDATE t SET b = 'q' WHERE id = 2`, round, "resync", `UPDATE t SET b = 'r' WHERE id = 3`}},
	{name: "entry_column_renamed", entry: "    columns:\n      - {name: d, type: \"Nullable(Int64)\"}\n",
		steps: []string{`ALTER TABLE t RENAME COLUMN d TO d2`, `UPDATE t SET b = 'q', d2 = 1 WHERE id = 2`}},
	{name: "entry_column_retyped_fits", entry: "    columns:\n      - {name: d, type: \"Nullable(Int64)\"}\n",
		steps: []string{`ALTER TABLE t ALTER COLUMN d TYPE bigint USING d * 3`, `UPDATE t SET b = 'q', d = 5000000000 WHERE id = 2`}},
	{name: "add_identity", steps: []string{round, `ALTER TABLE t ADD COLUMN e bigint GENERATED ALWAYS AS IDENTITY`}},
	{name: "add_serial_in_stream", steps: []string{`ALTER TABLE t ADD COLUMN e serial`, `UPDATE t SET b = 'q' WHERE id = 2`}},
	{name: "add_default_vacuum_full", steps: []string{round, `ALTER TABLE t ADD COLUMN e int DEFAULT 5`, `VACUUM FULL t`}},
	{name: "add_default_set_default_vacuum_full", steps: []string{round, `ALTER TABLE t ADD COLUMN e int DEFAULT 5`, `ALTER TABLE t ALTER COLUMN e SET DEFAULT 7`, `VACUUM FULL t`}},
	{name: "add_default_set_default_vacuum_full_in_stream", steps: []string{round, `ALTER TABLE t ADD COLUMN e int DEFAULT 5`, `ALTER TABLE t ALTER COLUMN e SET DEFAULT 7`, `VACUUM FULL t`, `UPDATE t SET b = 'q' WHERE id = 2`}},
	{name: "left_publication_and_back_sync_between", steps: []string{round, `ALTER PUBLICATION %[1]s DROP TABLE t`, `UPDATE t SET b = 'out' WHERE id <= 10`, "sync",
		`DELETE FROM t WHERE id = 11`, `ALTER PUBLICATION %[1]s ADD TABLE t`, `UPDATE t SET b = 'in' WHERE id = 12`}},
	{name: "left_publication_and_back_by_hand", steps: []string{round, `ALTER PUBLICATION %[1]s DROP TABLE t`, `UPDATE t SET b = 'out' WHERE id <= 10`,
		`ALTER PUBLICATION %[1]s ADD TABLE t`, `UPDATE t SET b = 'in' WHERE id = 12`}},
	{name: "left_publication_and_back", steps: []string{round, `ALTER PUBLICATION %[1]s DROP TABLE t`, `UPDATE t SET b = 'out' WHERE id <= 10`, `DELETE FROM t WHERE id = 11`}},
	{name: "identity_other_index", steps: []string{`CREATE UNIQUE INDEX t_c ON t (c)`, `ALTER TABLE t REPLICA IDENTITY USING INDEX t_c`, round,
		`UPDATE t SET id = id + 1000 WHERE id = 2`, `DELETE FROM t WHERE id = 3`, `UPDATE t SET c = -1, b = 'k' WHERE id = 4`}},
	{name: "add_weird_names", steps: []string{round, `ALTER TABLE t ADD COLUMN "we ird" int DEFAULT 3`, `ALTER TABLE t ADD COLUMN "Up" text DEFAULT 'u'`,
		`UPDATE t SET "we ird" = 4 WHERE id = 2`, `ALTER TABLE t RENAME COLUMN "Up" TO "up"`, `UPDATE t SET "up" = 'v' WHERE id = 3`}},
	{name: "table_recreated", steps: append([]string{`UPDATE t SET b = 'pre' WHERE id = 2`, `DROP TABLE t`}, append(ddlCreate("t"),
		`DELETE FROM t WHERE id > 20`, `UPDATE t SET b = 'post' WHERE id = 2`)...)},
	{name: "table_recreated_round", steps: append([]string{`UPDATE t SET b = 'pre' WHERE id = 2`, round, `DROP TABLE t`}, append(ddlCreate("t"),
		`DELETE FROM t WHERE id > 20`, `UPDATE t SET b = 'post' WHERE id = 2`)...)},
}

// TestSyncSchemaScenarios runs breakCases, each in a database of its own.
func TestSyncSchemaScenarios(t *testing.T) {
	cases := breakCases
	if only := os.Getenv("CDC_TEST_SCENARIOS"); only != "" {
		cases = slices.DeleteFunc(slices.Clone(cases), func(c breakCase) bool { return !slices.Contains(strings.Split(only, ","), c.name) })
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newSyncEnv(t)
			e.tables = []string{"public.t"}
			e.exec(append(ddlCreate("t"), c.pre...)...)
			cfg, env := e.config()
			if c.entry != "" {
				cfg, env = e.configYAML(fmt.Sprintf("  - source: {database: %s, schema: public, table: t}\n", e.slot) + c.entry)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			if _, err := SetupSync(ctx, cfg, env); err != nil {
				t.Fatal(err)
			}
			for i, s := range c.steps {
				if s == round {
					e.flowRound(ctx, cfg, env)
					continue
				}
				if s == "sync" {
					_, err := Sync(ctx, cfg, env)
					t.Logf("sync: %v", err)
					continue
				}
				if s == "resync" {
					rcfg := cfg
					rcfg.Resync = []string{"public.t"}
					e.flowRound(ctx, rcfg, env)
					continue
				}
				if strings.Contains(s, "%[1]s") {
					s = fmt.Sprintf(s, e.pub)
				}
				t.Logf("step %d: %s", i, s)
				e.exec(s)
			}
			if os.Getenv("CDC_TEST_SCENARIOS_RETRY") != "" {
				for i := 0; i < 3; i++ {
					_, errSetup := SetupSync(ctx, cfg, env)
					res, errSync := Sync(ctx, cfg, env)
					t.Logf("retry %d: setup %v; sync %v; %+v", i, errSetup, errSync, res)
				}
				t.Log(e.ch.query(`SELECT name, type, default_expression FROM system.columns WHERE database = ? AND table = 't'`, e.chDB))
				if q := os.Getenv("CDC_TEST_SCENARIOS_QUERY"); q != "" {
					t.Log(e.ch.query(strings.ReplaceAll(q, "DB", e.chDB)))
				}
			}
			for i := 0; i < 2; i++ {
				res := e.flowRound(ctx, cfg, env)
				t.Logf("round %d: %s", i, strings.ReplaceAll(fmt.Sprint(res.Resynced, res.SchemaChanges, res.Held), "\n", " "))
				if c.source == "" {
					e.sameTables(t)
					continue
				}
				cols := `a::text, id::text, b, c::text, d::text, j::text`
				e.same(`SELECT `+cols+` FROM `+c.source+` ORDER BY id`, `SELECT a, id, b, c, d, j FROM `+e.chDB+`.t_live ORDER BY id`)
			}
		})
	}
}

// TestSyncDDLDuringResyncLoad: a retype the stream cannot show makes sync
// resync the table; while the resync's load reads its snapshot, the source
// changes the table again (ddl, then rows). The flow, run until it ends
// without an error (at most five rounds), must end with the live view
// equal to the source.
func TestSyncDDLDuringResyncLoad(t *testing.T) {
	for _, c := range []struct{ name, ddl string }{
		{"add_default", `ALTER TABLE t ADD COLUMN e int DEFAULT 5`},
		{"drop_middle", `ALTER TABLE t DROP COLUMN b`},
		{"retype_again", `ALTER TABLE t ALTER COLUMN d TYPE bigint USING d * 3`},
		{"rename", `ALTER TABLE t RENAME COLUMN d TO d2`},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, cfg, env, ctx := setUpSync(t, "public.t", ddlCreate("t")...)
			e.exec(`UPDATE t SET b = 'x' WHERE id = 2`, `ALTER TABLE t ALTER COLUMN c TYPE bigint USING c + 1`, `UPDATE t SET c = 7 WHERE id = 3`)
			fired := false
			env.Hooks.Loading = func(context.Context) error {
				if !fired {
					fired = true
					e.exec(c.ddl, `UPDATE t SET a = -1 WHERE id = 4`, `INSERT INTO t (id) VALUES (700)`, `DELETE FROM t WHERE id = 5`)
				}
				return nil
			}
			var err error
			for run := 0; run < 5; run++ {
				if _, err = SetupSync(ctx, cfg, env); err != nil {
					t.Logf("round %d: setup: %v", run, err)
					continue
				}
				var res *Result
				if res, err = Sync(ctx, cfg, env); err != nil {
					t.Logf("round %d: sync: %v", run, err)
					continue
				}
				t.Logf("round %d: %v %v", run, res.Resynced, res.SchemaChanges)
				break
			}
			if !fired {
				t.Error("no resync load ran")
			}
			if err != nil {
				_, serr := Sync(ctx, cfg, env)
				rcfg := cfg
				rcfg.Resync = []string{"public.t"}
				_, rerr := SetupSync(ctx, rcfg, env)
				t.Logf("the hint's remedy, cdc setup with CDC_RESYNC=public.t: %v", rerr)
				defer func() {
					if rerr == nil {
						e.flowRound(ctx, cfg, env)
						e.sameTables(t)
					}
				}()
				t.Errorf("the flow still fails after five rounds: %v (exit %d, hint %q); cdc sync alone: %v",
					err, outcome.Classify(err).ExitCode(), slot.Hint(err), serr)
			}
			e.flowRound(ctx, cfg, env)
			e.sameTables(t)
		})
	}
}

// TestSyncHeldThenResyncUnderAWriter: a DROP NOT NULL then a NULL in the
// column holds the table (its target column is not Nullable); the
// operator's resync (CDC_RESYNC), while a writer changes the table, must
// release it and end with the live view equal to the source.
func TestSyncHeldThenResyncUnderAWriter(t *testing.T) {
	e, cfg, env, ctx := setUpSync(t, "public.t", ddlCreate("t")...)
	e.exec(`ALTER TABLE t ALTER COLUMN c DROP NOT NULL`, `UPDATE t SET c = NULL WHERE id = 3`, `UPDATE t SET b = 'after' WHERE id = 4`)
	_, err := Sync(ctx, cfg, env)
	t.Logf("sync: %v", err)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			e.exec(fmt.Sprintf(`UPDATE t SET c = CASE WHEN %[1]d %% 3 = 0 THEN NULL ELSE %[1]d END, b = 'w%[1]d' WHERE id = %[2]d`, i, 1+i%40),
				fmt.Sprintf(`INSERT INTO t (id, c) VALUES (%d, NULL)`, 1000+i))
		}
	}()
	cfg.Resync = []string{"public.t"}
	res, err := SetupSync(ctx, cfg, env)
	if err != nil {
		close(stop)
		<-done
		t.Fatalf("setup with the resync: %v", err)
	}
	t.Logf("resynced %v", res.Resynced)
	cfg.Resync = nil
	if _, err := Sync(ctx, cfg, env); err != nil {
		t.Errorf("sync after the resync, the writer busy: %v", err)
	}
	close(stop)
	<-done
	e.flowRound(ctx, cfg, env)
	e.sameTables(t)
}

// TestSyncStopsDuringAutoResync: a retype makes sync resync the table by
// itself; the run stops (an error at a hook, as a kill or a cut there
// would) at the n-th call of each hook, with a change of the table after
// each stopped run. The flow, run until it ends without an error, must
// end with the live view equal to the source.
func TestSyncStopsDuringAutoResync(t *testing.T) {
	errStop := errors.New("stopped")
	for _, hook := range []string{"Loading", "Locked", "BeforeInsert", "AfterInsert", "Recorded"} {
		for n := 1; n <= 3; n++ {
			t.Run(fmt.Sprintf("%s_%d", hook, n), func(t *testing.T) {
				e, cfg, env, ctx := setUpSync(t, "public.t", ddlCreate("t")...)
				env.Hooks.LoadChunkRows = 7
				cfg.FlushChanges = 2
				e.exec(`UPDATE t SET b = 'x' WHERE id = 2`, `ALTER TABLE t ALTER COLUMN c TYPE bigint USING c + 1`, `UPDATE t SET c = 7 WHERE id = 3`,
					`ALTER TABLE t ADD COLUMN e int DEFAULT 5`, `UPDATE t SET e = 1 WHERE id = 6`)
				h := nth(n, func(context.Context) error { return errStop })
				switch hook {
				case "Loading":
					env.Hooks.Loading = h
				case "Locked":
					env.Hooks.Locked = h
				case "BeforeInsert":
					env.Hooks.BeforeInsert = h
				case "AfterInsert":
					env.Hooks.AfterInsert = h
				case "Recorded":
					env.Hooks.Recorded = h
				}
				var err error
				stopped := false
				for run := 0; run < 6; run++ {
					if _, err = SetupSync(ctx, cfg, env); err == nil {
						_, err = Sync(ctx, cfg, env)
					}
					if err == nil {
						break
					}
					t.Logf("round %d: %v", run, err)
					stopped = stopped || errors.Is(err, errStop)
					e.exec(fmt.Sprintf(`UPDATE t SET a = %d WHERE id = 8`, run), fmt.Sprintf(`INSERT INTO t (id, c) VALUES (%d, 1)`, 800+run))
				}
				if err != nil {
					t.Fatalf("the flow still fails after six rounds: %v", err)
				}
				if !stopped {
					t.Skipf("the hook %s did not stop a run", hook)
				}
				env.Hooks.Loading, env.Hooks.Locked, env.Hooks.BeforeInsert, env.Hooks.AfterInsert, env.Hooks.Recorded = nil, nil, nil, nil, nil
				e.flowRound(ctx, cfg, env)
				e.sameTables(t)
			})
		}
	}
}

// TestSyncTwoTablesDDLInOneTransaction: one transaction changes two
// tables, each with DDL (a constant default added, a retype with a
// rewrite, a rename, a drop) and changes between them, interleaved.
func TestSyncTwoTablesDDLInOneTransaction(t *testing.T) {
	e := newSyncEnv(t)
	e.tables = []string{"public.t", "public.u"}
	e.exec(append(ddlCreate("t"), ddlCreate("u")...)...)
	cfg, env := e.config()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := SetupSync(ctx, cfg, env); err != nil {
		t.Fatal(err)
	}
	e.exec(`BEGIN; UPDATE t SET b = 't1' WHERE id = 2; ALTER TABLE t ADD COLUMN e int DEFAULT 5; UPDATE u SET b = 'u1' WHERE id = 2;
		ALTER TABLE u ALTER COLUMN c TYPE bigint USING c + 1; UPDATE t SET e = 6 WHERE id = 3; UPDATE u SET c = 7 WHERE id = 3;
		ALTER TABLE t RENAME COLUMN d TO d2; UPDATE u SET b = 'u2' WHERE id = 4; ALTER TABLE u DROP COLUMN a; UPDATE t SET d2 = 1 WHERE id = 4;
		INSERT INTO u (id) VALUES (900); DELETE FROM t WHERE id = 5; COMMIT`,
		`UPDATE u SET b = 'u3' WHERE id = 6`)
	for i := 0; i < 2; i++ {
		res := e.flowRound(ctx, cfg, env)
		t.Logf("round %d: %v %v", i, res.Resynced, res.SchemaChanges)
		e.sameTables(t)
	}
}

// TestSyncHeldThenMoreDDL: under schema_changes: refuse, a column added
// holds the table; while held, the source drops another column and
// renames a third, with changes; the operator's resync must end with the
// live view equal to the source.
func TestSyncHeldThenMoreDDL(t *testing.T) {
	e := newSyncEnv(t)
	e.tables = []string{"public.t"}
	e.exec(ddlCreate("t")...)
	cfg, env := e.configYAML(fmt.Sprintf("  - source: {database: %s, schema: public, table: t}\n    schema_changes: refuse\n", e.slot))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := SetupSync(ctx, cfg, env); err != nil {
		t.Fatal(err)
	}
	e.exec(`ALTER TABLE t ADD COLUMN e int DEFAULT 5`, `UPDATE t SET e = 6 WHERE id = 3`)
	_, err := Sync(ctx, cfg, env)
	t.Logf("sync: %v", err)
	e.exec(`ALTER TABLE t DROP COLUMN b`, `UPDATE t SET e = 7 WHERE id = 4`, `ALTER TABLE t RENAME COLUMN d TO d2`, `UPDATE t SET d2 = 1 WHERE id = 6`)
	_, err = Sync(ctx, cfg, env)
	t.Logf("sync: %v", err)
	rcfg := cfg
	rcfg.Resync = []string{"public.t"}
	if _, err := SetupSync(ctx, rcfg, env); err != nil {
		t.Fatalf("setup with the resync: %v", err)
	}
	if _, err := Sync(ctx, cfg, env); err != nil {
		t.Fatalf("sync after the resync: %v", err)
	}
	e.sameTables(t)
	e.exec(`UPDATE t SET e = 8 WHERE id = 7`)
	e.flowRound(ctx, cfg, env)
	e.sameTables(t)
}

// TestSyncUnmappableAddHoldsOneTable: a column added of a type no mapping
// is generated for (text[]) holds its table, naming the column; setup
// and sync go on, and the other tables' changes are applied.
func TestSyncUnmappableAddHoldsOneTable(t *testing.T) {
	e := newSyncEnv(t)
	e.tables = []string{"public.t", "public.u"}
	e.exec(append(ddlCreate("t"), ddlCreate("u")...)...)
	cfg, env := e.config()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := SetupSync(ctx, cfg, env); err != nil {
		t.Fatal(err)
	}
	e.exec(`ALTER TABLE t ADD COLUMN e text[] DEFAULT '{a,b}'`, `UPDATE t SET b = 'x' WHERE id = 2`, `UPDATE u SET b = 'y' WHERE id = 2`)
	if _, err := SetupSync(ctx, cfg, env); err != nil {
		t.Errorf("cdc setup stops the flow for every table: %v", err)
	}
	res, err := Sync(ctx, cfg, env)
	t.Logf("sync: %v", err)
	if res == nil || len(res.Held) != 1 || res.Held[0].Table != "public.t" || !strings.Contains(res.Held[0].Why, "added column e") {
		t.Errorf("sync: held %+v, want public.t held at its column e", res)
	}
	if !errors.Is(err, change.ErrHeld) {
		t.Errorf("sync: %v, want ErrHeld (exit 1 while a table is held)", err)
	}
	got := e.ch.query(`SELECT b FROM ` + e.chDB + `.u_live WHERE id = 2`)
	if strings.Join(got, "") != "y" {
		t.Errorf("u's change was not applied: b = %v", got)
	}
}
