package slotsync

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/change"
)

// TestSyncManyTables: three tables in one publication (one with a
// composite key, one with types of every family), loaded by setup, then
// written in transactions that span them; a column is added to one
// between runs (schema_changes: add_columns, the default: the target gets
// it Nullable) and another is TRUNCATEd. After each sync every live view
// equals its source table row by row.
//
//changesink:per-server
func TestSyncManyTables(t *testing.T) {
	e := newSyncEnv(t)
	e.tables = []string{"public.a", "public.b", "public.c"}
	e.exec(`CREATE TABLE a (id int PRIMARY KEY, v text NOT NULL)`,
		`CREATE TABLE b (region text, n bigint, qty int, PRIMARY KEY (region, n))`,
		`CREATE TABLE c (id bigint PRIMARY KEY, d date, ts timestamp(0), tz timestamptz(0), f double precision, ok boolean, amount numeric(10,2))`,
		`INSERT INTO a SELECT i, 'a'||i FROM generate_series(1, 50) i`,
		`INSERT INTO b SELECT 'r'||(i%3), i, i FROM generate_series(1, 50) i`,
		`INSERT INTO c VALUES (1, '2024-01-15', '2024-01-15 10:30:00', '2024-01-15 10:30:00+02', 0.1, true, 12.34), (2, NULL, NULL, NULL, NULL, NULL, NULL)`)
	cfg, env := e.config()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := SetupSync(ctx, cfg, env)
	if err != nil {
		t.Fatal(err)
	}
	if res.Loaded != 102 || len(res.Tables) != 3 {
		t.Fatalf("setup: %+v", res)
	}
	check := func() {
		t.Helper()
		e.same(`SELECT id::text, v FROM a ORDER BY a.id`, `SELECT id, v FROM `+e.chDB+`.a_live ORDER BY id`)
		e.same(`SELECT region, n::text, qty::text FROM b ORDER BY b.region COLLATE "C", b.n`, `SELECT region, n, qty FROM `+e.chDB+`.b_live ORDER BY region, n`)
		// Generated mappings: a date and a timestamp are String on 18.16,
		// Date and DateTime64 on 26.9 (docs/mapping.md); toString shows
		// either in PostgreSQL's ISO text.
		e.same(`SELECT id::text, d::text, to_char(ts, 'YYYY-MM-DD HH24:MI:SS.US'), to_char(tz AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US'), f::text, ok::text, (amount * 100)::bigint::text FROM c ORDER BY c.id`,
			`SELECT id, toString(d), toString(ts), toString(tz), toString(f), if(ok IS NULL, NULL, if(ok, 'true', 'false')), toString(toInt64(amount * 100)) FROM `+e.chDB+`.c_live ORDER BY id`)
	}
	check()
	e.exec(`BEGIN; UPDATE a SET v = 'x' WHERE id <= 10; DELETE FROM b WHERE n <= 5; INSERT INTO c VALUES (3, '2149-06-06', '2100-01-01 00:00:00', '1970-01-01 00:00:01+00', -0.5, false, -1.00); COMMIT`,
		`UPDATE b SET qty = qty + 1 WHERE region = 'r1'`,
		`DELETE FROM a WHERE id > 40`)
	if _, err := Sync(ctx, cfg, env); err != nil {
		t.Fatal(err)
	}
	check()

	// Between runs: a column added to a, b truncated and refilled, a
	// column of c dropped.
	e.exec(`ALTER TABLE a ADD COLUMN note text`, `UPDATE a SET note = 'n'||id WHERE id % 2 = 0`,
		`TRUNCATE b`, `INSERT INTO b VALUES ('r9', 1, 1)`, `UPDATE c SET f = 2.5 WHERE id = 1`, `ALTER TABLE c DROP COLUMN amount`,
		`INSERT INTO c (id, f) VALUES (4, 4.5)`)
	if _, err := Sync(ctx, cfg, env); err != nil {
		t.Fatal(err)
	}
	e.same(`SELECT id::text, v FROM a ORDER BY a.id`, `SELECT id, v FROM `+e.chDB+`.a_live ORDER BY id`)
	e.same(`SELECT region, n::text, qty::text FROM b ORDER BY b.region COLLATE "C", b.n`, `SELECT region, n, qty FROM `+e.chDB+`.b_live ORDER BY region, n`)
	// c's dropped column stays in the target: NULL in the rows written
	// since the drop (4), as it was in the others (1 was updated before it).
	e.same(`SELECT id::text, f::text, CASE id WHEN 1 THEN '1234' WHEN 3 THEN '-100' ELSE '\N' END FROM c ORDER BY c.id`,
		`SELECT id, toString(f), toString(toInt64(amount * 100)) FROM `+e.chDB+`.c_live ORDER BY id`)
	e.same(`SELECT id::text, coalesce(note, '\N') FROM a ORDER BY a.id`, `SELECT id, ifNull(note, '\\N') FROM `+e.chDB+`.a_live ORDER BY id`)
}

// TestSyncSettingsChecked: changesink sets the settings values are read
// under on the replication connection, and reads them back (SHOW) before
// streaming (pgvalue.CheckSettings: a pooler that drops startup
// parameters would be refused as configuration). A DSN asking for another
// DateStyle (options) does not change what is read: the values are right.
func TestSyncSettingsChecked(t *testing.T) {
	e, cfg, env, ctx := setUpSync(t, "public.s", `CREATE TABLE s (id int PRIMARY KEY, d date)`, `INSERT INTO s VALUES (1, '2024-03-04')`)
	e.exec(`INSERT INTO s VALUES (2, '2024-05-06')`)
	if strings.Contains(cfg.Postgres.DSN, "://") {
		sep := "?"
		if strings.Contains(cfg.Postgres.DSN, "?") {
			sep = "&"
		}
		cfg.Postgres.DSN += sep + "options=-c%20DateStyle%3DSQL%2CDMY"
	} else {
		cfg.Postgres.DSN += " options='-c DateStyle=SQL,DMY'"
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := Sync(ctx, cfg, env); err != nil {
		t.Fatal(err)
	}
	e.same(`SELECT id::text, d::text FROM s ORDER BY id`, `SELECT id, toString(d) FROM `+e.chDB+`.s_live ORDER BY id`)
}

// TestSyncBudgetReportsBehind: a run a budget ends reports how long ago
// the oldest transaction it left committed (behind_seconds); a run that
// catches up reports 0.
func TestSyncBudgetReportsBehind(t *testing.T) {
	e, cfg, env, ctx := setUpSync(t, "public.q", `CREATE TABLE q (id int PRIMARY KEY)`)
	e.exec(`INSERT INTO q VALUES (1)`, `INSERT INTO q VALUES (2)`, `INSERT INTO q VALUES (3)`)
	time.Sleep(1100 * time.Millisecond)
	cfg.MaxChanges = 1
	res, err := Sync(ctx, cfg, env)
	if err != nil {
		t.Fatal(err)
	}
	out := res.Outputs()
	if !strings.Contains(res.Why, EnvMaxChanges) || !res.BehindKnown || res.Behind < time.Second || res.Behind > time.Minute || out["behind_seconds"] == nil {
		t.Errorf("a run its budget ended: why %q, behind %s (known %v), outputs %v", res.Why, res.Behind, res.BehindKnown, out)
	}
	cfg.MaxChanges = 0
	if res, err = Sync(ctx, cfg, env); err != nil || res.Why != "caught up" || !res.BehindKnown || res.Behind != 0 {
		t.Errorf("a run that caught up: %+v, %v", res, err)
	}
}

// TestSetupSyncDropsItsSlotWhenTargetsFail: a setup whose targets are
// refused (here a table of the target's name with another key) drops the
// slot it created, so that the setup after the fix starts clean instead
// of refusing a slot whose snapshot is gone.
func TestSetupSyncDropsItsSlotWhenTargetsFail(t *testing.T) {
	e := newSyncEnv(t)
	e.tables = []string{"public.q"}
	e.exec(`CREATE TABLE q (id int PRIMARY KEY, n int)`, `INSERT INTO q VALUES (1, 1)`)
	if err := e.ch.conn.Exec(context.Background(), "CREATE TABLE "+e.chDB+".q (id Int32, n Int32, _cdc_lsn UInt64, _cdc_deleted UInt8) "+
		"ENGINE = ReplacingMergeTree(_cdc_lsn) ORDER BY (n, id)"); err != nil {
		t.Fatal(err)
	}
	cfg, env := e.config()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, err := SetupSync(ctx, cfg, env)
	wantError(t, err, outcome.Config, change.ErrTargetMismatch, e.chDB+".q")
	if got := e.rows(`SELECT count(*)::text FROM pg_replication_slots WHERE slot_name = '` + e.slot + `'`); strings.Join(got, ",") != "0" {
		t.Fatalf("slots named %s after the failed setup: %v, want none", e.slot, got)
	}
	if err := e.ch.conn.Exec(context.Background(), "DROP TABLE "+e.chDB+".q"); err != nil {
		t.Fatal(err)
	}
	res, err := SetupSync(ctx, cfg, env)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Created || res.Loaded != 1 {
		t.Errorf("the setup after the fix: %+v", res)
	}
}

// TestSyncSlowApplyKeepsTheStream: a flush whose apply takes longer than
// the server's wal_sender_timeout (here 4 s, set on the run's own
// connections; the default is a minute; 2 s failed once on a loaded CI
// machine, where a heartbeat every second has less margin) keeps its
// replication connection:
// the run tells the server it is alive while it writes ClickHouse, and
// confirms the flush at its end.
func TestSyncSlowApplyKeepsTheStream(t *testing.T) {
	e, cfg, env, ctx := setUpSync(t, "public.q", `CREATE TABLE q (id int PRIMARY KEY, n int)`, `INSERT INTO q VALUES (1, 1)`)
	e.exec(`INSERT INTO q VALUES (2, 2)`, `UPDATE q SET n = 10 WHERE id = 1`)
	sep := "?"
	if strings.Contains(cfg.Postgres.DSN, "?") {
		sep = "&"
	}
	cfg.Postgres.DSN += sep + "wal_sender_timeout=4s"
	env.Hooks.BeforeInsert = func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Second):
			return nil
		}
	}
	res, err := Sync(ctx, cfg, env)
	if err != nil {
		t.Fatalf("a flush applied in more than wal_sender_timeout: %v", err)
	}
	if res.Transactions != 2 || res.Why != "caught up" {
		t.Errorf("the slow run: %+v", res)
	}
	e.same(`SELECT id::text, n::text FROM q ORDER BY id`, `SELECT id, n FROM `+e.chDB+`.q_live ORDER BY id`)
	env.Hooks.BeforeInsert = nil
	if again, err := Sync(ctx, cfg, env); err != nil || again.Transactions != 0 {
		t.Errorf("the run after it (the flush was confirmed): %+v, %v", again, err)
	}
}
