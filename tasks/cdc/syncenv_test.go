package cdc

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/changesink/changesink/internal/testenv"
	"github.com/changesink/changesink/tasks/cdc/internal/testhook"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/slot"
	"github.com/changesink/changesink/tasks/cdc/target"
)

// The sync tests of this package (sync_refusals_test.go, sync_hint_test.go,
// syncsource_test.go, sync_switch_test.go) check what the facade adds to
// cdc sync: the hint of each refusal, and the trigger flow's targets taken
// over. Their source and target helpers are slotsync's (helpers_test.go,
// faults_test.go there), the few they use copied.

// syncEnv is a sync test's source database, with its slot and
// publication, and its ClickHouse database.
type syncEnv struct {
	t      testing.TB
	admin  string
	dsn    string
	slot   string
	pub    string
	chURL  string
	chDB   string
	ch     *env // the ClickHouse side's helpers (query)
	tables []string
}

func newSyncEnv(t testing.TB) *syncEnv {
	t.Helper()
	return newSyncEnvAt(t, testenv.Lookup(t, "CHANGESINK_TEST_PG")["CHANGESINK_TEST_PG"])
}

// newSyncEnvAt is newSyncEnv on the PostgreSQL server admin reaches.
func newSyncEnvAt(t testing.TB, admin string) *syncEnv {
	t.Helper()
	name := testenv.UniqueName(t, "sync_")
	e := &syncEnv{t: t, admin: admin, slot: name, pub: name}
	e.dsn = testenv.CreateDatabase(t, admin, name, "")
	t.Cleanup(e.dropSlot) // before the database: a slot keeps it
	e.chURL = testenv.ClickHouseURL(t)
	e.chDB, _ = testenv.CreateClickHouseDatabase(t, e.chURL, "cdc_sync_")
	e.ch = &env{t: t, url: e.chURL, conn: testenv.OpenClickHouse(t, e.chURL), db: e.chDB}
	return e
}

// exec runs statements on the source, each in its own transaction.
func (e *syncEnv) exec(stmts ...string) {
	e.t.Helper()
	testenv.ExecPostgres(e.t, e.dsn, stmts...)
}

// rows returns sql's rows on the source, tab-joined, NULL as \N.
func (e *syncEnv) rows(sql string) []string {
	e.t.Helper()
	return testenv.QueryPostgres(e.t, e.dsn, sql)
}

func (e *syncEnv) dropSlot() {
	testenv.DropSlot(e.t, e.admin, e.slot)
}

// config is the run's Config: every table into the test's ClickHouse
// database.
func (e *syncEnv) config() (SyncConfig, Env) {
	e.t.Helper()
	set, err := mapping.ParseSet("sync.yaml", []byte("defaults: {target: {database: "+e.chDB+"}}\ntables:\n"+e.tablesYAML()))
	if err != nil {
		e.t.Fatal(err)
	}
	return SyncConfig{Postgres: Postgres{DSN: e.dsn}, Slot: e.slot, Publication: e.pub, Mappings: set,
			ClickHouse: target.ClickHouse{URL: e.chURL, Timeout: time.Minute}},
		Env{hooks: testhook.Hooks{LockTiming: testLockTiming}}
}

func (e *syncEnv) tablesYAML() string {
	var b strings.Builder
	for _, t := range e.tables {
		schema, name, _ := strings.Cut(t, ".")
		fmt.Fprintf(&b, "  - source: {database: %s, schema: %s, table: %s}\n", e.slot, schema, name)
	}
	return b.String()
}

// same compares a source query with a ClickHouse query of the live view,
// row by row.
func (e *syncEnv) same(pgSQL, chSQL string) {
	e.t.Helper()
	want := e.rows(pgSQL)
	got := e.ch.query(chSQL)
	for i := range got {
		got[i] = strings.ReplaceAll(got[i], "NULL", `\N`)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		e.t.Errorf("ClickHouse\n%s\nPostgreSQL\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// setUpSync makes the source table (stmts: its CREATE and first rows),
// runs SetupSync for it alone and returns its env, the settings and a
// context of three minutes.
func setUpSync(t *testing.T, table string, stmts ...string) (*syncEnv, SyncConfig, Env, context.Context) {
	t.Helper()
	e := newSyncEnv(t)
	e.tables = []string{table}
	e.exec(stmts...)
	cfg, env := e.config()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	if _, err := SetupSync(ctx, cfg, env); err != nil {
		t.Fatal(err)
	}
	return e, cfg, env, ctx
}

// accEnv is a sync test's env on the PostgreSQL server admin reaches, with
// the table acc (1000 rows, some with TOASTed blobs) set up
// and loaded, and the config that syncs it.
func accEnv(t *testing.T, admin string) (*syncEnv, SyncConfig, Env) {
	t.Helper()
	e := newSyncEnvAt(t, admin)
	e.tables = []string{"public.acc"}
	e.exec(`CREATE TABLE acc (id bigint PRIMARY KEY, v bigint NOT NULL, tag text, blob text)`,
		`ALTER TABLE acc ALTER COLUMN blob SET STORAGE EXTERNAL`,
		`INSERT INTO acc SELECT i, i, 'tag '||i, CASE WHEN i % 10 = 0 THEN repeat(md5(i::text), 100) END FROM generate_series(1, 1000) i`)
	cfg, env := e.config()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := SetupSync(ctx, cfg, env); err != nil {
		t.Fatal(err)
	}
	return e, cfg, env
}

// sameAcc compares acc with its live view, row by row.
func (e *syncEnv) sameAcc() {
	e.t.Helper()
	e.sameAccOf("acc")
}

// sameAccOf compares a table of acc's columns with its live view, row by
// row.
func (e *syncEnv) sameAccOf(table string) {
	e.t.Helper()
	e.same(`SELECT id::text, v::text, tag, md5(blob) FROM `+table+` ORDER BY `+table+`.id`,
		`SELECT id, v, tag, lower(hex(MD5(blob))) FROM `+e.chDB+`.`+table+`_live ORDER BY id`)
}

// ledgerThrough is the position of the sync ledger's last row of the slot,
// and how many rows it has.
func (e *syncEnv) ledgerThrough() (slot.LSN, int) {
	e.t.Helper()
	got := e.ch.query(`SELECT through_lsn FROM `+e.chDB+`._changesink_sync WHERE slot = ? ORDER BY seq`, e.slot)
	if len(got) == 0 {
		return 0, 0
	}
	n, err := strconv.ParseUint(got[len(got)-1], 10, 64)
	if err != nil {
		e.t.Fatal(err)
	}
	return slot.LSN(n), len(got)
}

// resetup is the remedy the refusals' hints name: drop the slot, run the
// setup (a new slot, its snapshot loaded into the same targets), sync
// until caught up; the targets must then equal the source.
func (e *syncEnv) resetup(ctx context.Context, cfg SyncConfig, env Env) {
	e.t.Helper()
	e.dropSlot()
	if _, err := SetupSync(ctx, cfg, env); err != nil {
		e.t.Fatal(err)
	}
	e.catchUp(ctx, cfg, env)
	e.sameAcc()
}

// catchUp runs Sync until a run finds nothing new.
func (e *syncEnv) catchUp(ctx context.Context, cfg SyncConfig, env Env) {
	e.t.Helper()
	for range 20 {
		res, err := Sync(ctx, cfg, env)
		if err != nil {
			e.t.Fatalf("re-run: %v", err)
		}
		if res.Transactions == 0 && res.Why == "caught up" {
			return
		}
	}
	e.t.Fatal("20 runs did not catch up")
}

// noSlot fails the test when the slot exists: a setup refused before its
// load drops the slot it made.
func (e *syncEnv) noSlot() {
	e.t.Helper()
	if got := e.rows(`SELECT count(*)::text FROM pg_replication_slots WHERE slot_name = '` + e.slot + `'`); got[0] != "0" {
		e.t.Errorf("slot %s is left after a refused setup", e.slot)
	}
}
