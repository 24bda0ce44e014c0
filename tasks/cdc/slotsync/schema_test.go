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
	"github.com/changesink/changesink/tasks/cdc/target"
)

// ddlCase is one schema change of the source table, as the matrix of
// TestSyncSchemaChanges makes it: ddl (%[1]s is the table) and, after it,
// post, a change that uses the table's new shape.
type ddlCase struct {
	name, ddl, post string
	// inTx: the DDL may run inside a transaction block (VACUUM cannot).
	notInTx bool
}

// ddlCases are the schema changes of issue 33's table, on a table
// (a int, id int PRIMARY KEY, b text, c int NOT NULL DEFAULT 0, d int,
// j json): adds with a constant, a text and a volatile default and none,
// drops of the first, a middle, the last and a NOT NULL column, renames of
// the first, a middle and the last, retypes (widening with and without
// USING, varchar, narrowing with USING, the same type with USING, json to
// jsonb, another ClickHouse type), a generated column, a rewrite that
// changes nothing, a new primary key.
var ddlCases = []ddlCase{
	{name: "add_const", ddl: `ALTER TABLE %[1]s ADD COLUMN e int NOT NULL DEFAULT 5`, post: `UPDATE %[1]s SET e = 6 WHERE id = 3`},
	{name: "add_text_default", ddl: `ALTER TABLE %[1]s ADD COLUMN e text DEFAULT 'it''s'`, post: `UPDATE %[1]s SET e = 'x' WHERE id = 3`},
	{name: "add_volatile", ddl: `ALTER TABLE %[1]s ADD COLUMN e bigint DEFAULT (random() * 1e9)::bigint`, post: `UPDATE %[1]s SET e = 7 WHERE id = 3`},
	{name: "add_plain", ddl: `ALTER TABLE %[1]s ADD COLUMN e int`, post: `UPDATE %[1]s SET e = 8 WHERE id = 3`},
	{name: "drop_first", ddl: `ALTER TABLE %[1]s DROP COLUMN a`},
	{name: "drop_middle", ddl: `ALTER TABLE %[1]s DROP COLUMN b`},
	{name: "drop_last", ddl: `ALTER TABLE %[1]s DROP COLUMN d`},
	{name: "drop_notnull", ddl: `ALTER TABLE %[1]s DROP COLUMN c`},
	{name: "rename_first", ddl: `ALTER TABLE %[1]s RENAME COLUMN a TO a2`, post: `UPDATE %[1]s SET a2 = -1 WHERE id = 3`},
	{name: "rename_middle", ddl: `ALTER TABLE %[1]s RENAME COLUMN b TO b2`, post: `UPDATE %[1]s SET b2 = 'm' WHERE id = 3`},
	{name: "rename_last", ddl: `ALTER TABLE %[1]s RENAME COLUMN d TO d2`, post: `UPDATE %[1]s SET d2 = -1 WHERE id = 3`},
	{name: "retype_widen", ddl: `ALTER TABLE %[1]s ALTER COLUMN c TYPE bigint`, post: `UPDATE %[1]s SET c = 5000000000 WHERE id = 3`},
	{name: "retype_widen_using", ddl: `ALTER TABLE %[1]s ALTER COLUMN c TYPE bigint USING c * 2`},
	{name: "retype_varchar", ddl: `ALTER TABLE %[1]s ALTER COLUMN b TYPE varchar(50)`, post: `UPDATE %[1]s SET b = 'fifty' WHERE id = 3`},
	{name: "retype_narrow", ddl: `ALTER TABLE %[1]s ALTER COLUMN b TYPE varchar(3) USING left(b, 3)`},
	{name: "retype_same_using", ddl: `ALTER TABLE %[1]s ALTER COLUMN b TYPE text USING upper(b)`},
	{name: "retype_json", ddl: `ALTER TABLE %[1]s ALTER COLUMN j TYPE jsonb USING j::jsonb`, post: `UPDATE %[1]s SET j = '{"z": 1, "y": 2}' WHERE id = 3`},
	{name: "retype_to_text", ddl: `ALTER TABLE %[1]s ALTER COLUMN d TYPE text USING 'x' || d`, post: `UPDATE %[1]s SET d = 'y' WHERE id = 3`},
	{name: "generated", ddl: `ALTER TABLE %[1]s ADD COLUMN g int GENERATED ALWAYS AS (c * 2) STORED`},
	{name: "vacuum_full", ddl: `VACUUM FULL %[1]s`, notInTx: true},
	{name: "new_key", ddl: `ALTER TABLE %[1]s DROP CONSTRAINT %[1]s_pkey, ADD PRIMARY KEY (id, c)`},
}

// ddlTable makes the matrix's table name of case c.
func ddlTable(c ddlCase) string { return "t_" + c.name }

// ddlCreate creates a case's table with 40 rows, some NULLs among them.
func ddlCreate(table string) []string {
	return []string{
		fmt.Sprintf(`CREATE TABLE %s (a int, id int PRIMARY KEY, b text, c int NOT NULL DEFAULT 0, d int, j json)`, table),
		fmt.Sprintf(`INSERT INTO %s SELECT CASE WHEN i %% 7 = 0 THEN NULL ELSE i END, i, CASE WHEN i %% 5 = 0 THEN NULL ELSE 'b' || i END, i * 10,
			CASE WHEN i %% 3 = 0 THEN NULL ELSE i * 100 END, ('{"k": ' || i || ', "a": 1}')::json FROM generate_series(1, 40) i`, table),
	}
}

// ddlBefore changes a case's table in its shape before the DDL.
func ddlBefore(table string, n int) []string {
	return []string{
		fmt.Sprintf(`UPDATE %s SET d = coalesce(d, 0) + 1, b = 'pre%d' WHERE id = %d`, table, n, 10+n),
		fmt.Sprintf(`INSERT INTO %s VALUES (%d, %d, 'new', 1, 2)`, table, 100+n, 100+n),
		fmt.Sprintf(`DELETE FROM %s WHERE id = %d`, table, 20+n),
	}
}

// ddlAfter changes a case's table in its shape after the DDL: the case's
// own change, an insert of the key alone, a key change and a delete.
func ddlAfter(c ddlCase, table string, n int) []string {
	var out []string
	if c.post != "" {
		out = append(out, fmt.Sprintf(c.post, table))
	}
	return append(out,
		fmt.Sprintf(`INSERT INTO %s (id) VALUES (%d)`, table, 200+n),
		fmt.Sprintf(`UPDATE %s SET id = id + 1000 WHERE id = %d`, table, 30+n),
		fmt.Sprintf(`DELETE FROM %s WHERE id = %d`, table, 31+n))
}

// ddlPlacement is where the matrix puts a schema change in the stream.
type ddlPlacement int

const (
	// betweenRuns: changes, a sync, the DDL, and no change after it
	// before the flow runs: the stream shows nothing of the DDL.
	betweenRuns ddlPlacement = iota
	// inStream: changes, the DDL, changes, all before one sync run.
	inStream
	// inTransaction: one transaction with changes, the DDL and changes.
	inTransaction
	// duringLoad: changes, the DDL and changes while the initial load
	// reads the table (after its snapshot, before its first chunk).
	duringLoad
)

// TestSyncSchemaChanges runs every schema change of ddlCases, each on a
// table of its own, all in one publication, at each placement: the flow
// (cdc setup, then cdc sync, as the shipped flow runs them) then ends
// with every table's live view equal to its source, row by row, over the
// source's columns (a generated column is left out of the target); a
// second round of the flow changes nothing.
//
//changesink:per-server
func TestSyncSchemaChanges(t *testing.T) {
	if only := os.Getenv("CDC_TEST_DDL_CASES"); only != "" {
		ddlCases = slices.DeleteFunc(slices.Clone(ddlCases), func(c ddlCase) bool { return !slices.Contains(strings.Split(only, ","), c.name) })
	}
	for _, p := range []struct {
		name string
		at   ddlPlacement
	}{{"between_runs", betweenRuns}, {"in_stream", inStream}, {"in_transaction", inTransaction}, {"during_load", duringLoad}} {
		t.Run(p.name, func(t *testing.T) {
			e := newSyncEnv(t)
			var stmts []string
			for _, c := range ddlCases {
				if p.at == inTransaction && c.notInTx {
					continue
				}
				e.tables = append(e.tables, "public."+ddlTable(c))
				stmts = append(stmts, ddlCreate(ddlTable(c))...)
			}
			e.exec(stmts...)
			cfg, env := e.config()
			// Many tables' locks beat at once here: slower than the kill
			// tests' timing allows on a loaded machine.
			env.Hooks.LockTiming = target.LockTiming{Beat: time.Second, Stale: 30 * time.Second, Wait: time.Minute, Poll: 100 * time.Millisecond}
			ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
			defer cancel()
			if p.at == duringLoad {
				e.loadWhileChanging(ctx, cfg, env)
				e.flowRound(ctx, cfg, env)
				e.sameTables(t)
				return
			}
			if _, err := SetupSync(ctx, cfg, env); err != nil {
				t.Fatal(err)
			}
			for i, c := range ddlCases {
				if p.at == inTransaction && c.notInTx {
					continue
				}
				tbl := ddlTable(c)
				ddl := fmt.Sprintf(c.ddl, tbl)
				switch p.at {
				case betweenRuns:
					e.exec(ddlBefore(tbl, i)...)
				case inStream:
					e.exec(ddlBefore(tbl, i)...)
					e.exec(ddl)
					e.exec(ddlAfter(c, tbl, i)...)
				case inTransaction:
					e.exec("BEGIN; " + strings.Join(ddlBefore(tbl, i), "; ") + "; " + ddl + "; " + strings.Join(ddlAfter(c, tbl, i), "; ") + "; COMMIT")
				}
			}
			if p.at == betweenRuns {
				e.flowRound(ctx, cfg, env)
				for _, c := range ddlCases {
					e.exec(fmt.Sprintf(c.ddl, ddlTable(c)))
				}
			}
			e.flowRound(ctx, cfg, env)
			e.sameTables(t)
			res := e.flowRound(ctx, cfg, env)
			if res.Transactions != 0 {
				t.Errorf("a second round applied %d transactions", res.Transactions)
			}
			e.sameTables(t)
		})
	}
}

// TestSyncConfirmsLostAcrossSchemaChanges loses the slot's confirm of
// every flush once (the run stops after the flush's ledger row, before
// the confirm, as a kill there or a stream closed before the server read
// the confirm would): the next run gets the flush's transactions again,
// the schema changes among them too, though the targets already follow
// them. They are skipped by position, not decoded under the old
// definitions: every table ends equal to its source.
//
//changesink:per-server
func TestSyncConfirmsLostAcrossSchemaChanges(t *testing.T) {
	cases := slices.DeleteFunc(slices.Clone(ddlCases), func(c ddlCase) bool {
		return !slices.Contains([]string{"add_const", "add_text_default", "drop_last", "rename_middle", "retype_widen", "retype_narrow", "new_key"}, c.name)
	})
	e := newSyncEnv(t)
	var stmts []string
	for _, c := range cases {
		e.tables = append(e.tables, "public."+ddlTable(c))
		stmts = append(stmts, ddlCreate(ddlTable(c))...)
	}
	e.exec(stmts...)
	cfg, env := e.config()
	cfg.FlushChanges = 3
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := SetupSync(ctx, cfg, env); err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		tbl := ddlTable(c)
		e.exec("BEGIN; " + strings.Join(ddlBefore(tbl, i), "; ") + "; " + fmt.Sprintf(c.ddl, tbl) + "; " +
			strings.Join(ddlAfter(c, tbl, i), "; ") + "; COMMIT")
	}
	errLost := errors.New("the confirm is lost")
	lost := 0
	env.Hooks.Recorded = func(context.Context) error {
		lost++
		return errLost
	}
	for run := 0; ; run++ {
		if run > 40 {
			t.Fatalf("still losing confirms after %d runs", run)
		}
		_, err := Sync(ctx, cfg, env)
		if err == nil {
			break
		}
		if !errors.Is(err, errLost) {
			t.Fatalf("run %d, after %d lost confirms: %v", run, lost, err)
		}
	}
	if lost < len(cases) {
		t.Errorf("%d confirms lost, want one at each of the %d transactions at least", lost, len(cases))
	}
	// The run that skipped the last replay moved the slot to the ledger.
	if through, _ := e.ledgerThrough(); e.slotConfirmed() < through {
		t.Errorf("the slot is confirmed at %s, behind the sync ledger's %s", e.slotConfirmed(), through)
	}
	env.Hooks.Recorded = nil
	e.flowRound(ctx, cfg, env)
	e.sameTables(t)
}

// TestSyncStopsAfterAFollow stops a run after its target followed a
// schema change (the ClickHouse table altered, the shape recorded) and
// before the transaction of the change was applied, as a kill there
// would: the next run gets the transaction again with the definition from
// before the change first, which the target no longer has. It must not
// undo the change (a column it followed "dropped", older rows read
// without it): every table ends equal to its source.
//
//changesink:per-server
func TestSyncStopsAfterAFollow(t *testing.T) {
	cases := slices.DeleteFunc(slices.Clone(ddlCases), func(c ddlCase) bool {
		return !slices.Contains([]string{"add_const", "add_text_default", "add_plain", "drop_last", "drop_notnull", "rename_middle", "retype_widen", "retype_varchar"}, c.name)
	})
	e := newSyncEnv(t)
	var stmts []string
	for _, c := range cases {
		e.tables = append(e.tables, "public."+ddlTable(c))
		stmts = append(stmts, ddlCreate(ddlTable(c))...)
	}
	e.exec(stmts...)
	cfg, env := e.config()
	cfg.FlushChanges = 1 // a flush for each transaction: none pending at a follow
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := SetupSync(ctx, cfg, env); err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		tbl := ddlTable(c)
		e.exec("BEGIN; " + strings.Join(ddlBefore(tbl, i), "; ") + "; " + fmt.Sprintf(c.ddl, tbl) + "; " +
			strings.Join(ddlAfter(c, tbl, i), "; ") + "; COMMIT")
	}
	// Every other insert fails: each transaction's first, the one after
	// its follow.
	errStop := errors.New("stopped before the insert")
	inserts := 0
	env.Hooks.BeforeInsert = func(context.Context) error {
		if inserts++; inserts%2 == 1 {
			return errStop
		}
		return nil
	}
	for run := 0; ; run++ {
		if run > 40 {
			t.Fatalf("still stopping after %d runs", run)
		}
		_, err := Sync(ctx, cfg, env)
		if err == nil {
			break
		}
		if !errors.Is(err, errStop) {
			t.Fatalf("run %d: %v", run, err)
		}
	}
	if inserts < 2*len(cases) {
		t.Errorf("%d inserts, want two for each of the %d transactions at least", inserts, len(cases))
	}
	env.Hooks.BeforeInsert = nil
	e.flowRound(ctx, cfg, env)
	e.sameTables(t)
}

// resyncedNames are the tables res loaded again, sorted.
func resyncedNames(res *Result) []string {
	var out []string
	for _, r := range res.Resynced {
		out = append(out, r.Table)
	}
	slices.Sort(out)
	return out
}

// TestSyncFollowAndResyncInOneTransaction: one transaction changes a
// table the target follows in place (a column added with a default) and,
// after it, one that needs a resync (a column added that a later
// transaction dropped: its values cannot be told): the run follows the
// first, then restarts its stream before the transaction to load the
// second, and gets the transaction again with the first table's
// definition from before its change. Every table ends equal to its
// source.
//
//changesink:per-server
func TestSyncFollowAndResyncInOneTransaction(t *testing.T) {
	e := newSyncEnv(t)
	var stmts []string
	for _, tbl := range []string{"t_first", "t_second"} {
		e.tables = append(e.tables, "public."+tbl)
		stmts = append(stmts, ddlCreate(tbl)...)
	}
	e.exec(stmts...)
	cfg, env := e.config()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := SetupSync(ctx, cfg, env); err != nil {
		t.Fatal(err)
	}
	e.exec(`BEGIN; `+strings.Join(ddlBefore("t_first", 0), "; ")+`;
		ALTER TABLE t_first ADD COLUMN e text DEFAULT 'it''s';
		UPDATE t_first SET e = 'x' WHERE id = 3;
		`+strings.Join(ddlBefore("t_second", 1), "; ")+`;
		ALTER TABLE t_second ADD COLUMN z int;
		UPDATE t_second SET z = 1, b = 'after' WHERE id = 4;
		UPDATE t_first SET e = 'y' WHERE id = 5;
		COMMIT`,
		`ALTER TABLE t_second DROP COLUMN z`)
	res, err := Sync(ctx, cfg, env)
	if err != nil {
		t.Fatal(err)
	}
	if got := resyncedNames(res); !slices.Equal(got, []string{"public.t_first", "public.t_second"}) {
		t.Errorf("resynced %v, want both tables (the second for its column, the first at the restart)", got)
	}
	e.sameTables(t)
	e.flowRound(ctx, cfg, env)
	e.sameTables(t)
}

// loadWhileChanging runs the first cdc setup with every case's changes,
// DDL and changes after it made once its load's snapshot is taken: a
// setup whose load a change stops (a table rewritten after the snapshot,
// a column gone) fails transient, as a task retry would see it, and the
// flow's next round continues the load.
func (e *syncEnv) loadWhileChanging(ctx context.Context, cfg Config, env Env) {
	e.t.Helper()
	done := false
	env.Hooks.Loading = func(context.Context) error {
		if done {
			return nil
		}
		done = true
		for i, c := range ddlCases {
			tbl := ddlTable(c)
			e.exec(ddlBefore(tbl, i)...)
			e.exec(fmt.Sprintf(c.ddl, tbl))
			e.exec(ddlAfter(c, tbl, i)...)
		}
		return nil
	}
	_, err := SetupSync(ctx, cfg, env)
	if err != nil && (outcome.Classify(err) != outcome.Transient || !errors.Is(err, change.ErrChangedDuringLoad)) {
		e.t.Fatalf("cdc setup during the changes: %v", err)
	}
	if !done {
		e.t.Fatal("the load's hook did not run")
	}
	e.t.Logf("the first setup: %v", err)
}

// flowRound runs the shipped flow's two tasks once: cdc setup, then cdc
// sync; either failing fails the test (the flow would be wedged).
func (e *syncEnv) flowRound(ctx context.Context, cfg Config, env Env) *Result {
	e.t.Helper()
	if _, err := SetupSync(ctx, cfg, env); err != nil {
		e.t.Fatalf("cdc setup: %v", err)
	}
	res, err := Sync(ctx, cfg, env)
	if err != nil {
		e.t.Fatalf("cdc sync: %v", err)
	}
	return res
}

// sameTables compares every table of the env with its live view, over
// the source's columns but its generated ones, ordered by id.
func (e *syncEnv) sameTables(t *testing.T) {
	t.Helper()
	for _, qt := range e.tables {
		_, name, _ := strings.Cut(qt, ".")
		cols := e.rows(fmt.Sprintf(`SELECT attname FROM pg_attribute WHERE attrelid = 'public.%s'::regclass AND attnum > 0
			AND NOT attisdropped AND attgenerated = '' ORDER BY attnum`, name))
		pg := make([]string, len(cols))
		ch := make([]string, len(cols))
		for i, c := range cols {
			pg[i] = fmt.Sprintf(`%q::text`, c)
			ch[i] = fmt.Sprintf("`%s`", c)
		}
		t.Run(name, func(t *testing.T) {
			outer, chOuter := e.t, e.ch.t
			e.t, e.ch.t = t, t
			defer func() { e.t, e.ch.t = outer, chOuter }()
			e.same(fmt.Sprintf(`SELECT %s FROM %s ORDER BY %[2]s.id`, strings.Join(pg, ", "), name),
				fmt.Sprintf(`SELECT %s FROM %s.%s_live ORDER BY id`, strings.Join(ch, ", "), e.chDB, name))
		})
	}
}

// TestSyncRetypeTimestampInAZone: timestamp to timestamptz under a session
// time zone other than UTC rewrites the table (each value read as that
// zone's local time), which the stream does not show: the table is loaded
// again, its values the instants PostgreSQL holds now.
//
//changesink:per-server
func TestSyncRetypeTimestampInAZone(t *testing.T) {
	e, cfg, env, ctx := setUpSync(t, "public.tz", `CREATE TABLE tz (id int PRIMARY KEY, ts timestamp)`,
		`INSERT INTO tz SELECT i, '2020-01-01'::timestamp + i * interval '1 hour' FROM generate_series(1, 20) i`)
	e.exec(`UPDATE tz SET ts = ts + interval '1 minute' WHERE id = 1`,
		`SET TimeZone = 'America/New_York'; ALTER TABLE tz ALTER COLUMN ts TYPE timestamptz`,
		`INSERT INTO tz VALUES (21, '2021-06-01 12:00:00+02')`)
	e.flowRound(ctx, cfg, env)
	typ := e.ch.query(`SELECT type FROM system.columns WHERE database = '` + e.chDB + `' AND table = 'tz' AND name = 'ts'`)
	switch got := strings.Join(typ, ""); {
	case strings.Contains(got, "DateTime64"):
		e.same(`SELECT id::text, (extract(epoch FROM ts) * 1000000)::bigint::text FROM tz ORDER BY tz.id`,
			`SELECT id, toUnixTimestamp64Micro(ts) FROM `+e.chDB+`.tz_live ORDER BY id`)
	default:
		// A String of the instant in UTC, as the generated mapping writes it.
		e.same(`SELECT id::text, to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') FROM tz ORDER BY tz.id`,
			`SELECT id, ts FROM `+e.chDB+`.tz_live ORDER BY id`)
	}
}
