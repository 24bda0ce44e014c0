package cdc

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/changesink/changesink/internal/kestra"
	"github.com/changesink/changesink/internal/testenv"
)

// env is one integration test's target: a database and a mapping in it.
type env struct {
	t    testing.TB
	url  string
	conn driver.Conn
	db   string
	m    *Mapping
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
var testLockTiming = lockTiming{beat: 200 * time.Millisecond, stale: 4 * time.Second, wait: 20 * time.Second, poll: 50 * time.Millisecond}

func (e *env) config(batch string) Config {
	return Config{
		Mapping:    e.m,
		ClickHouse: ClickHouse{URL: e.url, Timeout: time.Minute},
		BatchFile:  batch,
		OutDir:     kestra.Dir{Path: e.t.TempDir()},
		lockTiming: testLockTiming,
	}
}

// caps connects with e's mapping and returns what the server supports.
func (e *env) caps() serverCaps {
	e.t.Helper()
	tg, err := connect(context.Background(), e.config("").ClickHouse, e.m)
	if err != nil {
		e.t.Fatal(err)
	}
	defer tg.close()
	return tg.caps
}

func (e *env) setup() {
	e.t.Helper()
	if _, err := Setup(context.Background(), e.config("")); err != nil {
		e.t.Fatalf("Setup: %v", err)
	}
}

// apply writes events as a batch file and applies it.
func (e *env) apply(binary bool, events ...any) (*Result, Config, error) {
	e.t.Helper()
	cfg := e.config(writeFile(e.t, "changes.ion", encode(e.t, binary, events...)))
	res, err := Apply(context.Background(), cfg)
	return res, cfg, err
}

// query returns the rows of a query as tab-joined strings.
func (e *env) query(sql string, args ...any) []string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rows, err := e.conn.Query(ctx, sql, args...)
	if err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
	defer rows.Close()
	var out []string
	cols := rows.ColumnTypes()
	for rows.Next() {
		dest := make([]any, len(cols))
		for i, c := range cols {
			dest[i] = newOf(c.ScanType())
		}
		if err := rows.Scan(dest...); err != nil {
			e.t.Fatal(err)
		}
		parts := make([]string, len(dest))
		for i, d := range dest {
			parts[i] = fmt.Sprint(deref(d))
		}
		out = append(out, strings.Join(parts, "\t"))
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// outputs reads an output file of a run ("" when absent).
func outputFile(t testing.TB, cfg Config, name string) (string, bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cfg.OutDir.Path, name))
	if os.IsNotExist(err) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b), true
}

// noOutputs checks that a failed run left no file in its output directory.
func noOutputs(t testing.TB, cfg Config) {
	t.Helper()
	entries, err := os.ReadDir(cfg.OutDir.Path)
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

// TestReadAcrossParts: the reads keep FINAL's answer with the keys as a
// PREWHERE, on versions spread over parts (a newer version in an older
// part, a delete marker, an exact duplicate), and current reads payloads
// only where the target holds the batch's own LSN.
func TestReadAcrossParts(t *testing.T) {
	e := newEnv(t, ordersMapping)
	e.setup()
	name := qualified(e.db, e.m.Target.Table)
	for _, part := range []string{ // one INSERT, one part each
		"SELECT 1, 10, 1, 'a200', 200, 0 UNION ALL SELECT 2, 20, 2, 'b100', 100, 0 UNION ALL SELECT 3, 30, 3, 'c50', 50, 0",
		"SELECT 1, 11, 1, 'a100', 100, 0 UNION ALL SELECT 2, 0, 0, '', 300, 1",
		"SELECT 3, 30, 3, 'c50', 50, 0 UNION ALL SELECT 4, 40, 4, 'd10', 10, 0",
	} {
		if err := e.conn.Exec(context.Background(), "INSERT INTO "+name+" (id, customer_id, amount_cents, status, _cdc_lsn, _cdc_deleted) "+part); err != nil {
			t.Fatal(err)
		}
	}
	tbl := e.lockedTable()
	key := func(id int64, lsn uint64) *row {
		r := &row{lsn: lsn, vals: make([]value, len(e.m.cols))}
		r.vals[0] = value{n: uint64(id)}
		r.key = string(encodeKey(nil, e.m, r.vals))
		return r
	}
	batch := []*row{key(1, 200), key(2, 150), key(3, 50), key(5, 1)}
	render := func(got map[string]*row) string {
		var lines []string
		for _, r := range got {
			line := fmt.Sprintf("version lsn=%d deleted=%v", r.lsn, r.deleted)
			if r.vals != nil {
				line = fmt.Sprintf("%s lsn=%d deleted=%v %s", renderKey(e.m, r.vals), r.lsn, r.deleted, appendJSONRow(nil, e.m, r))
			}
			lines = append(lines, line)
		}
		sort.Strings(lines)
		return strings.Join(lines, "\n")
	}
	full, err := tbl.read(context.Background(), batch)
	if err != nil {
		t.Fatal(err)
	}
	want := `id=1 lsn=200 deleted=false {"id": 1, "customer_id": 10, "amount_cents": 1, "status": "a200", "_cdc_lsn": 200, "_cdc_deleted": 0}
id=2 lsn=300 deleted=true {"id": 2, "customer_id": 0, "amount_cents": 0, "status": "", "_cdc_lsn": 300, "_cdc_deleted": 1}
id=3 lsn=50 deleted=false {"id": 3, "customer_id": 30, "amount_cents": 3, "status": "c50", "_cdc_lsn": 50, "_cdc_deleted": 0}`
	if got := render(full); got != want {
		t.Errorf("read\n%s\nwant\n%s", got, want)
	}
	// The same as the FINAL ... WHERE the reads used before.
	old := e.query("SELECT id, customer_id, amount_cents, status, _cdc_lsn, _cdc_deleted FROM " + name + " FINAL WHERE id IN (1, 2, 3, 5) ORDER BY id")
	if strings.Join(old, "\n") != "1\t10\t1\ta200\t200\t0\n2\t0\t0\t\t300\t1\n3\t30\t3\tc50\t50\t0" {
		t.Errorf("FINAL ... WHERE gives %q", old)
	}
	cur, err := tbl.current(context.Background(), batch)
	if err != nil {
		t.Fatal(err)
	}
	want = `id=1 lsn=200 deleted=false {"id": 1, "customer_id": 10, "amount_cents": 1, "status": "a200", "_cdc_lsn": 200, "_cdc_deleted": 0}
id=3 lsn=50 deleted=false {"id": 3, "customer_id": 30, "amount_cents": 3, "status": "c50", "_cdc_lsn": 50, "_cdc_deleted": 0}
version lsn=300 deleted=true`
	if got := render(cur); got != want {
		t.Errorf("current (payloads only at the batch's own LSN)\n%s\nwant\n%s", got, want)
	}
}
