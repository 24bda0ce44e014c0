package target

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/changesink/changesink/tasks/cdc/mapping"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/changesink/changesink/internal/testenv"
)

// env is one integration test's target: a database of its own on the
// test server and a mapping in it.
type env struct {
	t    testing.TB
	url  string
	conn driver.Conn
	db   string
	m    *mapping.Mapping
}

func newEnv(t testing.TB, mappingPath string) *env {
	t.Helper()
	url := testenv.ClickHouseURL(t)
	db, _ := testenv.CreateClickHouseDatabase(t, url, "cdc_")
	e := &env{t: t, url: url, conn: testenv.OpenClickHouse(t, url), db: db}
	e.m = loadMapping(t, mappingPath)
	e.m.Target.Database = e.db
	e.m.Target.CreateDatabase = false
	return e
}

// testLockTiming breaks a stale lock (a run a test cut or killed) within
// seconds instead of DefaultLockTiming's 30 s.
var testLockTiming = LockTiming{Beat: 200 * time.Millisecond, Stale: 4 * time.Second, Wait: 20 * time.Second, Poll: 50 * time.Millisecond}

// clickHouse is how the env's runs reach its server.
func (e *env) clickHouse() ClickHouse { return ClickHouse{URL: e.url, Timeout: time.Minute} }

// setup sets the env's target up as cdc setup does.
func (e *env) setup() {
	e.t.Helper()
	ctx := context.Background()
	s, err := Connect(ctx, e.clickHouse(), e.m)
	if err != nil {
		e.t.Fatal(err)
	}
	defer s.Close()
	if err := s.CheckSupported(); err != nil {
		e.t.Fatal(err)
	}
	if _, err := s.Setup(ctx); err != nil {
		e.t.Fatalf("Setup: %v", err)
	}
}

// lockedTable opens the env's target as apply does.
func (e *env) lockedTable() *Table {
	e.t.Helper()
	return e.openTable(e.clickHouse())
}

// openTable connects to ch and checks the env's target as apply does.
func (e *env) openTable(ch ClickHouse) *Table {
	e.t.Helper()
	s, err := Connect(context.Background(), ch, e.m)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(s.Close)
	tbl, err := s.CheckSchema(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return tbl
}

// proxied starts a proxy in front of e's ClickHouse and returns it with the
// URL that goes through it.
func (e *env) proxied() (*testenv.Proxy, string) {
	e.t.Helper()
	u, err := url.Parse(e.url)
	if err != nil {
		e.t.Fatal(err)
	}
	p := testenv.StartProxy(e.t, u.Host, testenv.ProxyOptions{})
	via := *u
	via.Host = p.Addr()
	return p, via.String()
}

// query returns the rows of a query as tab-joined strings.
func (e *env) query(sql string, args ...any) []string {
	e.t.Helper()
	return testenv.QueryClickHouse(e.t, e.conn, sql, args...)
}
