package slotsync

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
	"github.com/changesink/changesink/tasks/cdc/internal/testhook"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/slot"
	"github.com/changesink/changesink/tasks/cdc/target"
)

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
	ch     *chEnv // the ClickHouse side's helpers (query)
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
	e.ch = &chEnv{t: t, url: e.chURL, conn: testenv.OpenClickHouse(t, e.chURL), db: e.chDB}
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
func (e *syncEnv) config() (Config, Env) {
	e.t.Helper()
	set, err := mapping.ParseSet("sync.yaml", []byte("defaults: {target: {database: "+e.chDB+"}}\ntables:\n"+e.tablesYAML()))
	if err != nil {
		e.t.Fatal(err)
	}
	return Config{Postgres: Postgres{DSN: e.dsn}, Slot: e.slot, Publication: e.pub, Mappings: set,
			ClickHouse: target.ClickHouse{URL: e.chURL, Timeout: time.Minute}},
		Env{Log: slog.New(slog.NewTextHandler(testLog{e.t}, nil)), Hooks: testhook.Hooks{LockTiming: testLockTiming}}
}

// testLog writes a run's log to its test's, which prints it when the
// test fails (or under -v): what the run did before a failed comparison.
type testLog struct{ t testing.TB }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// configYAML is config with entries (YAML list items of tables:) in
// place of the env's tables' plain entries for the tables they name.
func (e *syncEnv) configYAML(entries string) (Config, Env) {
	e.t.Helper()
	var plain []string
	for _, line := range strings.Split(e.tablesYAML(), "\n") {
		_, name, _ := strings.Cut(line, "table: ")
		if line != "" && !strings.Contains(entries, "table: "+strings.TrimSuffix(name, "}")) {
			plain = append(plain, line)
		}
	}
	yaml := "defaults: {target: {database: " + e.chDB + "}}\ntables:\n" + strings.Join(plain, "\n")
	if len(plain) > 0 {
		yaml += "\n"
	}
	set, err := mapping.ParseSet("sync.yaml", []byte(yaml+entries))
	if err != nil {
		e.t.Fatal(err)
	}
	cfg, env := e.config()
	cfg.Mappings = set
	return cfg, env
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
func setUpSync(t *testing.T, table string, stmts ...string) (*syncEnv, Config, Env, context.Context) {
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

// chEnv is a sync test's ClickHouse database.
type chEnv struct {
	t    testing.TB
	url  string
	conn driver.Conn
	db   string
}

// query returns the rows of a query as tab-joined strings.
func (c *chEnv) query(sql string, args ...any) []string {
	c.t.Helper()
	return testenv.QueryClickHouse(c.t, c.conn, sql, args...)
}

// exec runs statements without a result (DDL, INSERT) on the test's
// ClickHouse server.
func (c *chEnv) exec(stmts ...string) {
	c.t.Helper()
	for _, q := range stmts {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := c.conn.Exec(ctx, q)
		cancel()
		if err != nil {
			c.t.Fatalf("%s: %v", q, err)
		}
	}
}

// waitMutations waits until the mutations of table (ALTER TABLE … DELETE
// or UPDATE) are done.
func (c *chEnv) waitMutations(table string) {
	c.t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if got := c.query(`SELECT count() FROM system.mutations WHERE database = ? AND table = ? AND is_done = 0`, c.db, table); len(got) == 1 && got[0] == "0" {
			return
		}
	}
	c.t.Fatalf("the mutations of %s.%s did not end within a minute", c.db, table)
}

// proxied starts a proxy in front of the ClickHouse server and returns it
// with the URL that goes through it.
func (c *chEnv) proxied() (*testenv.Proxy, string) {
	c.t.Helper()
	u, err := url.Parse(c.url)
	if err != nil {
		c.t.Fatal(err)
	}
	p := testenv.StartProxy(c.t, u.Host, testenv.ProxyOptions{})
	via := *u
	via.Host = p.Addr()
	return p, via.String()
}

// testLockTiming breaks a stale lock (a run a test cut or killed) within
// seconds instead of target.DefaultLockTiming's 30 s.
var testLockTiming = target.LockTiming{Beat: 200 * time.Millisecond, Stale: 4 * time.Second, Wait: 20 * time.Second, Poll: 50 * time.Millisecond}

// wantError is testenv.WantError for cdc sync: says may be found in the
// error or in the hint the slot package gives for its own causes
// (slot.Hint), which the facade's Hint falls back to; the refusals whose
// remedy is the facade's hints table are tested there (tasks/cdc).
func wantError(t testing.TB, err error, kind outcome.Kind, is error, says ...string) {
	t.Helper()
	testenv.WantHinted(t, err, slot.Hint, kind, is, says...)
}

// sharedPG is the admin DSN of the shared test server.
func sharedPG(t *testing.T) string {
	t.Helper()
	return testenv.Lookup(t, "CHANGESINK_TEST_PG")["CHANGESINK_TEST_PG"]
}

// wantRefused checks a refusal: the sentinel, the class and its exit code,
// and that the hint (slot.Hint, as wantError) says each of remedy.
func wantRefused(t *testing.T, err error, kind outcome.Kind, exit int, is error, remedy ...string) {
	t.Helper()
	wantError(t, err, kind, is)
	if got := outcome.Classify(err).ExitCode(); got != exit {
		t.Errorf("exit code %d, want %d", got, exit)
	}
	hint := slot.Hint(err)
	for _, r := range remedy {
		if !strings.Contains(hint, r) {
			t.Errorf("the hint does not say %q: %s", r, hint)
		}
	}
	t.Logf("error: %v\nhint: %s", err, hint)
}

// liveIDs2 is the ids of a table's live view, comma-joined.
func (e *syncEnv) liveIDs2(table string) string {
	e.t.Helper()
	return strings.Join(e.ch.query(`SELECT id FROM `+e.chDB+`.`+table+`_live ORDER BY id`), ",")
}
