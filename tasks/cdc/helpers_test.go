package cdc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/merge"
	"github.com/changesink/changesink/tasks/cdc/target"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/changesink/changesink/internal/iongen"
	"github.com/changesink/changesink/internal/kestra"
	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
	"github.com/changesink/changesink/tasks/cdc/internal/testhook"
)

// ordersMapping is the mapping shipped in flows/ for the seed's orders table.
const ordersMapping = "../../flows/orders.mapping.yaml"

func loadMapping(t testing.TB, path string) *mapping.Mapping {
	t.Helper()
	m, err := mapping.Load(path)
	if err != nil {
		t.Fatalf("LoadMapping(%s): %v", path, err)
	}
	return m
}

// orderRow is an orders row image; nil fields are written as Ion nulls.
func orderRow(id int64, customer, amount any, status any) iongen.Struct {
	return iongen.Struct{{"id", id}, {"customer_id", customer}, {"amount_cents", amount}, {"status", status}}
}

// orderEvent is an INLINE event of shop.public.orders.
func orderEvent(id int64, customer, amount, status any, lsn any, deleted bool) iongen.Struct {
	op := "UPDATE"
	if deleted {
		op = "DELETE"
	}
	return iongen.Event(orderRow(id, customer, amount, status), deleted,
		iongen.Metadata(op, iongen.Source("shop", "public", "orders", lsn, 700, "false")))
}

// createEvent is a CREATE event of row in shop.public.orders.
func createEvent(row iongen.Struct, lsn int64) iongen.Struct {
	return iongen.Event(row, false, iongen.Metadata("CREATE", iongen.Source("shop", "public", "orders", lsn, 700, "false")))
}

// encode writes events in text (binary=false) or binary Ion.
func encode(t testing.TB, binary bool, events ...any) []byte {
	t.Helper()
	var b bytes.Buffer
	w := iongen.NewWriter(&b, binary)
	for _, e := range events {
		var err error
		if raw, ok := e.([]byte); ok {
			err = w.Raw(raw)
		} else {
			err = w.Write(e)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

// writeFile writes data to a file in a fresh temp dir and returns its path.
func writeFile(t testing.TB, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	testenv.WriteFile(t, p, data, 0o644)
	return p
}

// offlineConfig applies batch with the mapping m against a ClickHouse
// address nothing listens at (testenv.ClosedAddr), writing into a fresh
// directory: for runs that must end, refused or misconfigured, before the
// server is needed.
func offlineConfig(t testing.TB, m *mapping.Mapping, batch string) testRun {
	t.Helper()
	return testRun{Config{Mapping: m, ClickHouse: target.ClickHouse{URL: "clickhouse://" + testenv.ClosedAddr(t) + "/default"},
		BatchFile: batch}, Env{Dir: kestra.Dir{Path: t.TempDir()}}}
}

// testRun is one run's Config and Env, as a test sets them up.
type testRun struct {
	Config
	Env
}

// testApply applies r's batch.
func testApply(ctx context.Context, r testRun) (*Result, error) { return Apply(ctx, r.Config, r.Env) }

// testSetup sets r's target up.
func testSetup(ctx context.Context, r testRun) (*SetupResult, error) {
	return Setup(ctx, r.Config, r.Env)
}

// decodeBytes decodes a batch held in memory with the given worker count.
func decodeBytes(t testing.TB, m *mapping.Mapping, data []byte, workers int) (*merge.Batch, error) {
	t.Helper()
	return decodeFile(context.Background(), writeFile(t, "changes.ion", data), m, workers)
}

func forms() []struct {
	name   string
	binary bool
} {
	return []struct {
		name   string
		binary bool
	}{{"text", false}, {"binary", true}}
}

// setHook sets cfg's hook that runs at point: "locked" (the target's lock
// held), "before the insert", "after the insert" or "after the ledger row"
// (before the lock is given back).
func setHook(t *testing.T, cfg *testRun, point string, f func(context.Context) error) {
	t.Helper()
	switch point {
	case "locked":
		cfg.hooks.Locked = f
	case "before the insert":
		cfg.hooks.BeforeInsert = f
	case "after the insert":
		cfg.hooks.AfterInsert = f
	case "after the ledger row":
		cfg.hooks.Recorded = f
	default:
		t.Fatalf("no hook at %q", point)
	}
}

// proxiedOrders sets e's target up and returns a proxy in front of its
// server, a batch of two new orders and the config that applies it
// through the proxy.
func (e *env) proxiedOrders() (p *testenv.Proxy, batch string, cfg testRun) {
	e.t.Helper()
	e.setup()
	p, viaProxy := e.proxied()
	batch = writeFile(e.t, "changes.ion", encode(e.t, false,
		orderEvent(1, int64(10), int64(500), "new", int64(100), false),
		orderEvent(2, int64(20), int64(700), "new", int64(101), false)))
	cfg = e.config(batch)
	cfg.ClickHouse.URL = viaProxy
	return p, batch, cfg
}

// replays applies batch again and checks that the run is a replay: nothing
// pending, the verified keys as given.
func (e *env) replays(batch string, verified int64) {
	e.t.Helper()
	res, err := testApply(context.Background(), e.config(batch))
	if err != nil {
		e.t.Fatalf("re-run: %v", err)
	}
	if res.Pending != 0 || res.Verified != verified {
		e.t.Errorf("re-run outputs %v, want a replay (pending 0, %d verified)", res.Outputs(), verified)
	}
}

// env is one integration test's target: a database and a mapping in it.
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
// seconds instead of defaultLockTiming's 30 s.
var testLockTiming = target.LockTiming{Beat: 200 * time.Millisecond, Stale: 4 * time.Second, Wait: 20 * time.Second, Poll: 50 * time.Millisecond}

func (e *env) config(batch string) testRun {
	return testRun{
		Config{Mapping: e.m, ClickHouse: target.ClickHouse{URL: e.url, Timeout: time.Minute}, BatchFile: batch},
		Env{Dir: kestra.Dir{Path: e.t.TempDir()}, hooks: testhook.Hooks{LockTiming: testLockTiming}},
	}
}

// finalSQL selects cols (a list of the orders target's columns) from the
// target's winning rows where the condition where holds ("" for all), by
// id: what FINAL shows, and on a ReplacingMergeTree(version, deleted),
// whose FINAL leaves delete markers out, the newest delete marker of each
// key it left out (as target.query reads them): the same rows on every
// server.
func (e *env) finalSQL(cols, where string) string {
	name := mapping.Qualified(e.db, e.m.Target.Table)
	and := ""
	if where != "" {
		where, and = " WHERE "+where, " AND "+where
	}
	return "SELECT " + cols + " FROM (SELECT " + cols + ", id AS _k FROM " + name + " FINAL" + where +
		" UNION ALL SELECT " + cols + ", id AS _k FROM " + name + " WHERE _cdc_deleted = 1" + and +
		" AND id NOT IN (SELECT id FROM " + name + " FINAL) ORDER BY _cdc_lsn DESC LIMIT 1 BY id) ORDER BY _k"
}

// onWire returns the bytes a statement travels as to the test server, for
// a proxy to cut on: its text, over the native protocol and in an HTTP
// request's body (changesink's inserts are INSERT … SELECT statements,
// whose rows travel as an external table: over HTTP, a multipart body
// holding the rows and then the query).
func (e *env) onWire(sql string) []byte {
	return []byte(sql)
}

// version is the server's version(), as "18.16.1" or "26.9.2.1".
func (e *env) version() string {
	e.t.Helper()
	return e.query("SELECT version()")[0]
}

// atLeast reports whether the server is major.minor or newer.
func (e *env) atLeast(major, minor int) bool {
	e.t.Helper()
	var ma, mi int
	if _, err := fmt.Sscanf(e.version(), "%d.%d", &ma, &mi); err != nil {
		e.t.Fatalf("server version %q: %v", e.version(), err)
	}
	return ma > major || (ma == major && mi >= minor)
}

// caps connects with e's mapping and returns what the server supports.
func (e *env) caps() mapping.ServerCaps {
	e.t.Helper()
	tg, err := target.Connect(context.Background(), e.config("").ClickHouse, e.m)
	if err != nil {
		e.t.Fatal(err)
	}
	defer tg.Close()
	return tg.Caps
}

func (e *env) setup() {
	e.t.Helper()
	if _, err := testSetup(context.Background(), e.config("")); err != nil {
		e.t.Fatalf("Setup: %v", err)
	}
}

// apply writes events as a batch file and applies it.
func (e *env) apply(binary bool, events ...any) (*Result, testRun, error) {
	e.t.Helper()
	cfg := e.config(writeFile(e.t, "changes.ion", encode(e.t, binary, events...)))
	res, err := testApply(context.Background(), cfg)
	return res, cfg, err
}

// columnsOf returns the names of the columns of a table of e's database,
// as system.columns lists them.
func (e *env) columnsOf(table string) []string {
	e.t.Helper()
	return e.query("SELECT name FROM system.columns WHERE database = ? AND table = ?", e.db, table)
}

// columnList renders m's mapped columns, quoted, in mapping order.
func columnList(m *mapping.Mapping) string {
	names := make([]string, len(m.Cols))
	for i := range m.Cols {
		names[i] = mapping.QuoteIdent(m.Cols[i].Name)
	}
	return strings.Join(names, ", ")
}

// keyList renders m's key columns, quoted, in key order (the target's
// ORDER BY).
func keyList(m *mapping.Mapping) string {
	names := make([]string, len(m.KeyIdx))
	for n, i := range m.KeyIdx {
		names[n] = mapping.QuoteIdent(m.Cols[i].Name)
	}
	return strings.Join(names, ", ")
}

// query returns the rows of a query as tab-joined strings.
func (e *env) query(sql string, args ...any) []string {
	e.t.Helper()
	return testenv.QueryClickHouse(e.t, e.conn, sql, args...)
}

// outputFile reads an output file of a run (false when absent).
func outputFile(t testing.TB, cfg testRun, name string) (string, bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cfg.Dir.Path, name))
	if os.IsNotExist(err) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b), true
}

// noOutputs checks that a failed run left no file in its output directory.
func noOutputs(t testing.TB, cfg testRun) {
	t.Helper()
	entries, err := os.ReadDir(cfg.Dir.Path)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("a failed run left %s", e.Name())
	}
}

func newOf(t reflect.Type) any { return reflect.New(t).Interface() }

func deref(p any) any {
	v := reflect.ValueOf(p)
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return "NULL"
		}
		v = v.Elem()
	}
	return v.Interface()
}

// lockedTable opens the env's target as apply does.
func (e *env) lockedTable() *target.Table {
	e.t.Helper()
	return e.openTable(e.config("").ClickHouse)
}

// openTable connects to ch and checks the env's target as apply does.
func (e *env) openTable(ch target.ClickHouse) *target.Table {
	e.t.Helper()
	tg, err := target.Connect(context.Background(), ch, e.m)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(tg.Close)
	tbl, err := tg.CheckSchema(context.Background())
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

// realBatches holds the batches real Debezium wrote (harness/debezium).
const realBatches = "testdata/debezium"

// scenarioEnv is a target for the real Debezium scenario name (testdata/
// debezium/<name>), in a database of the test's own.
func scenarioEnv(t *testing.T, name string) *env {
	t.Helper()
	e := newEnv(t, filepath.Join(realBatches, name, "mapping.yaml"))
	e.setup()
	return e
}

// applyScenario applies the scenario's batches in order (binary: Kestra
// 2.x's form, else 1.x's) and returns the last result.
func (e *env) applyScenario(name string, binary bool) *Result {
	e.t.Helper()
	var res *Result
	for n := 1; ; n++ {
		path := filepath.Join(realBatches, name, fmt.Sprintf("changes-%02d.%s.ion", n, form(binary)))
		if _, err := os.Stat(path); err != nil {
			break
		}
		var err error
		if res, err = testApply(context.Background(), e.config(path)); err != nil {
			e.t.Fatalf("%s batch %d: %v", name, n, err)
		}
	}
	return res
}

func form(binary bool) string {
	if binary {
		return "binary"
	}
	return "text"
}

// liveJSON renders the live view as the scenario's rows.jsonl does.
func (e *env) liveJSON() string {
	e.t.Helper()
	var cols []string
	for i := range e.m.Cols {
		cols = append(cols, mapping.QuoteIdent(e.m.Cols[i].Name))
	}
	var b strings.Builder
	for _, line := range e.query("SELECT " + strings.Join(cols, ", ") + " FROM " + mapping.Qualified(e.db, e.m.Target.LiveView) + " ORDER BY " + keyList(e.m)) {
		parts := strings.Split(line, "\t")
		obj := "{"
		for i, p := range parts {
			if i > 0 {
				obj += ","
			}
			v, _ := json.Marshal(p)
			if e.m.Cols[i].Type.Kind == mapping.KindInt {
				v = []byte(p)
			}
			obj += fmt.Sprintf("%q:%s", e.m.Cols[i].Name, v)
		}
		b.WriteString(obj + "}\n")
	}
	return b.String()
}

func sourceRows(t *testing.T, name string) string {
	t.Helper()
	f, err := os.Open(filepath.Join(realBatches, name, "rows.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b strings.Builder
	s := bufio.NewScanner(f)
	for s.Scan() {
		b.WriteString(s.Text() + "\n")
	}
	return b.String()
}

// physical returns every physical row of the target (for "nothing changed").
func (e *env) physical() string {
	e.t.Helper()
	return strings.Join(e.query("SELECT * FROM "+mapping.Qualified(e.db, e.m.Target.Table)+" ORDER BY tuple(*)"), "\n")
}

// endsAsTheSourceThenReplays applies a real scenario's batches in one form:
// the live view holds the source's rows; the batches again in the other
// form are replays (nothing pending, verified keys).
func endsAsTheSourceThenReplays(t *testing.T, scenario string, verified int64) {
	for _, f := range forms() {
		t.Run(f.name, func(t *testing.T) {
			e := scenarioEnv(t, scenario)
			e.applyScenario(scenario, f.binary)
			if got, want := e.liveJSON(), sourceRows(t, scenario); got != want {
				t.Errorf("live rows\n%s\nwant (the source)\n%s", got, want)
			}
			res := e.applyScenario(scenario, !f.binary)
			if res.Pending != 0 || res.Verified != verified {
				t.Errorf("replay: %v", res.Outputs())
			}
		})
	}
}

// withSource sets metadata.source.<name> of an event built by iongen.
func withSource(ev iongen.Struct, name string, v any) iongen.Struct {
	for i := range ev {
		if ev[i].Name != "metadata" {
			continue
		}
		md := ev[i].Value.(iongen.Struct)
		for j := range md {
			if md[j].Name != "source" {
				continue
			}
			src := md[j].Value.(iongen.Struct)
			for k := range src {
				if src[k].Name == name {
					src[k].Value = v
				}
			}
		}
	}
	return ev
}

// overlapEvent is an event of the overlap scenario's table (id, v) from a
// snapshot (READ) or the stream.
func overlapEvent(op string, id int64, v string, lsn int64, snapshot string, sequence string) iongen.Struct {
	ev := iongen.Event(iongen.Struct{{"id", id}, {"v", v}}, op == "DELETE",
		iongen.Metadata(op, iongen.Source("cs_dbz_overlap_stream", "public", "overlap", lsn, 7205, snapshot)))
	if sequence != "" {
		ev = withSource(ev, "sequence", sequence)
	}
	return ev
}

// wantError is testenv.WantError for cdc: says may be found in the error
// or in its hint (Hint), which the CLI prints apart.
func wantError(t testing.TB, err error, kind outcome.Kind, is error, says ...string) {
	t.Helper()
	testenv.WantHinted(t, err, Hint, kind, is, says...)
}

// checkError is wantError for a test that goes on after a mismatch.
func checkError(t testing.TB, err error, kind outcome.Kind, is error, says ...string) bool {
	t.Helper()
	return testenv.CheckHinted(t, err, Hint, kind, is, says...)
}
