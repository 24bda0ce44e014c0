package cdc

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
)

// The refusals of cdc sync's position check, each with its sentinel, its
// class (exit code) and a hint that names the remedy; after each, nothing
// was written, and where the remedy can be followed in a test, following
// it converges.

// sharedPG is the admin DSN of the shared test server.
func sharedPG(t *testing.T) string {
	t.Helper()
	return testenv.Lookup(t, "CHANGESINK_TEST_PG")["CHANGESINK_TEST_PG"]
}

// wantRefused checks a refusal: the sentinel, the class and its exit code,
// and that the hint says each of remedy.
func wantRefused(t *testing.T, err error, kind outcome.Kind, exit int, is error, remedy ...string) {
	t.Helper()
	wantError(t, err, kind, is)
	if got := outcome.Classify(err).ExitCode(); got != exit {
		t.Errorf("exit code %d, want %d", got, exit)
	}
	hint := Hint(err)
	for _, r := range remedy {
		if !strings.Contains(hint, r) {
			t.Errorf("the hint does not say %q: %s", r, hint)
		}
	}
	t.Logf("error: %v\nhint: %s", err, hint)
}

// liveIDs is the ids of acc's live view, comma-joined.
func (e *syncEnv) liveIDs(where string) string {
	e.t.Helper()
	return strings.Join(e.ch.query(`SELECT id FROM `+e.chDB+`.acc_live WHERE `+where+` ORDER BY id`), ",")
}

// TestSyncRefusesBeforeTheLoad: a setup stopped once it holds the
// targets' locks, before its load (the slot made, no sync ledger row),
// leaves a slot sync refuses (ErrNotLoaded, exit 1; the hint: run the
// setup); the setup run again loads the tables (from a new snapshot), and
// sync converges, changes made meanwhile included.
func TestSyncRefusesBeforeTheLoad(t *testing.T) {
	e := newSyncEnv(t)
	e.tables = []string{"public.acc"}
	e.exec(`CREATE TABLE acc (id bigint PRIMARY KEY, v bigint NOT NULL, tag text, blob text)`,
		`INSERT INTO acc SELECT i, i, 'tag '||i, NULL FROM generate_series(1, 100) i`)
	cfg, env := e.config()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	stopped, stop := context.WithCancel(ctx)
	stopping := env
	stopping.hooks.Locked = func(context.Context) error { stop(); return nil }
	if _, err := SetupSync(stopped, cfg, stopping); err == nil {
		t.Fatal("a setup stopped before its load succeeded")
	}
	if _, rows := e.ledgerThrough(); rows != 0 {
		t.Fatalf("the stopped setup wrote %d sync ledger rows", rows)
	}
	if got := e.rows(`SELECT count(*)::text FROM pg_replication_slots WHERE slot_name = '` + e.slot + `'`); got[0] != "1" {
		t.Fatalf("the stopped setup left %s slots, want its own", got[0])
	}
	e.exec(`INSERT INTO acc VALUES (101, 101, 'after', NULL)`, `DELETE FROM acc WHERE id = 5`)

	_, err := Sync(ctx, cfg, env)
	wantRefused(t, err, outcome.Refused, 1, change.ErrNotLoaded, "Run changesink cdc setup")
	if got := e.liveIDs("1 = 1"); got != "" {
		t.Errorf("the refused run wrote ids %s", got)
	}
	if _, err := SetupSync(ctx, cfg, env); err != nil {
		t.Fatal(err)
	}
	e.exec(`UPDATE acc SET v = -v WHERE id <= 10`)
	e.catchUp(ctx, cfg, env)
	e.sameAcc()
}

// TestSyncRefusesASlotAhead: a slot another consumer moved past the sync
// ledger (pg_replication_slot_advance) is refused (ErrSlotAhead, exit 1),
// nothing written, every run alike; the remedy's new setup converges.
func TestSyncRefusesASlotAhead(t *testing.T) {
	e, cfg, env := accEnv(t, sharedPG(t))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e.exec(`UPDATE acc SET v = 0 WHERE id = 1`)
	e.catchUp(ctx, cfg, env)
	e.exec(`UPDATE acc SET v = -2 WHERE id = 2`, `DELETE FROM acc WHERE id = 3`)
	e.exec(`SELECT pg_replication_slot_advance('` + e.slot + `', pg_current_wal_lsn())`)
	for range 2 {
		_, err := Sync(ctx, cfg, env)
		wantRefused(t, err, outcome.Refused, 1, change.ErrSlotAhead, "drop the slot (SELECT pg_drop_replication_slot(", "then run changesink cdc setup")
		if !strings.Contains(err.Error(), e.slot) {
			t.Errorf("the message does not name the slot: %v", err)
		}
	}
	if got := e.liveIDs("id <= 3 AND v <= 0"); got != "1" {
		t.Errorf("after the refusals, ids %q of 1..3 hold v <= 0 or are gone, want 1 (the run before)", got)
	}
	e.resetup(ctx, cfg, env)
}

// TestSyncRefusesAnotherSource: the targets were loaded from one database;
// a slot of the same name in another database (the DSN changed, or a
// restore) is refused (ErrOtherSource, exit 1), naming both, nothing
// written.
func TestSyncRefusesAnotherSource(t *testing.T) {
	e, cfg, env := accEnv(t, sharedPG(t))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	other := testenv.CreateDatabase(t, e.admin, testenv.UniqueName(t, "other_"), "")
	t.Cleanup(e.dropSlot) // before the other database's drop: the slot moves there
	o := &syncEnv{t: t, admin: e.admin, dsn: other}
	o.exec(`CREATE TABLE acc (id bigint PRIMARY KEY, v bigint NOT NULL, tag text, blob text)`,
		`CREATE PUBLICATION `+e.pub+` FOR TABLE acc`)
	e.dropSlot()
	o.exec(`SELECT pg_create_logical_replication_slot('`+e.slot+`', 'pgoutput')`,
		`INSERT INTO acc VALUES (1, -1, 'other', NULL)`)
	ocfg := cfg
	ocfg.Postgres.DSN = other
	// The same targets, whatever the source database is called.
	set, err := mapping.ParseSet("sync.yaml", []byte("defaults: {target: {database: "+e.chDB+"}}\ntables:\n  - source: {schema: public, table: acc}\n"))
	if err != nil {
		t.Fatal(err)
	}
	ocfg.Mappings = set
	if err := ocfg.Validate(); err != nil {
		t.Fatal(err)
	}
	_, err = Sync(ctx, ocfg, env)
	wantRefused(t, err, outcome.Refused, 1, change.ErrOtherSource, "Point CDC_POSTGRES_DSN at the database the targets were loaded from")
	if !strings.Contains(err.Error(), e.slot) {
		t.Errorf("the message does not name the slot: %v", err)
	}
	e.sameAcc()
}

// TestSyncSetupOnAnotherSystem: the targets were loaded from one
// PostgreSQL system; after a failover to another (a cluster of the test's
// own, whose LSNs are far below the first's), the setup of a slot of the
// same name, the targets kept, is refused (ErrOtherSource, exit 1) before
// it writes: its snapshot's versions would lose to the old system's rows,
// and the target would keep them; it drops the slot it made. Following
// the hint (the targets dropped) loads the new system's rows, and sync
// streams on.
func TestSyncSetupOnAnotherSystem(t *testing.T) {
	e, cfg, env := accEnv(t, sharedPG(t))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pg := testenv.PrivatePostgres(t, "wal_level = logical")
	o := &syncEnv{t: t, admin: pg.Admin, dsn: testenv.CreateDatabase(t, pg.Admin, e.slot, ""), slot: e.slot, ch: e.ch, chDB: e.chDB}
	t.Cleanup(o.dropSlot)
	// Half the keys, with other values, and a key the old system lacks: a
	// load that skipped what the target holds newer would leave the rest.
	o.exec(`CREATE TABLE acc (id bigint PRIMARY KEY, v bigint NOT NULL, tag text, blob text)`,
		`INSERT INTO acc SELECT i, -i, 'failed over', NULL FROM generate_series(1, 1000, 2) i`, `INSERT INTO acc VALUES (5000, 5000, 'new', NULL)`)
	ocfg := cfg
	ocfg.Postgres.DSN = o.dsn
	if err := ocfg.Validate(); err != nil {
		t.Fatal(err)
	}
	_, err := SetupSync(ctx, ocfg, env)
	wantRefused(t, err, outcome.Refused, 1, change.ErrOtherSource, "After a restore or a failover to a new system: drop the slot and the targets")
	e.sameAcc()
	o.noSlot() // the refused setup dropped the slot it made
	for _, name := range []string{"acc_live", "acc", "acc_ledger"} {
		if err := e.ch.conn.Exec(ctx, `DROP TABLE `+mapping.Qualified(e.chDB, name)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := SetupSync(ctx, ocfg, env); err != nil {
		t.Fatal(err)
	}
	o.exec(`UPDATE acc SET v = 0 WHERE id < 10`, `DELETE FROM acc WHERE id = 11`)
	o.catchUp(ctx, ocfg, env)
	o.sameAcc()
}

// liveIDs2 is the ids of a table's live view, comma-joined.
func (e *syncEnv) liveIDs2(table string) string {
	e.t.Helper()
	return strings.Join(e.ch.query(`SELECT id FROM `+e.chDB+`.`+table+`_live ORDER BY id`), ",")
}
