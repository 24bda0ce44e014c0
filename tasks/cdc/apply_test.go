package cdc

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
	"github.com/changesink/changesink/tasks/cdc/internal/batchfile"
	"github.com/changesink/changesink/tasks/cdc/internal/iongen"
)

func TestApplyOrders(t *testing.T) {
	for _, f := range forms() {
		t.Run(f.name, func(t *testing.T) {
			e := newEnv(t, ordersMapping)
			e.setup()
			res, cfg, err := e.apply(f.binary,
				orderEvent(1, int64(10), int64(500), "new", int64(100), false),
				orderEvent(2, int64(20), int64(700), "new", int64(101), false),
				orderEvent(1, int64(10), int64(550), "paid", int64(102), false),
				orderEvent(3, int64(30), int64(900), "new", int64(103), false),
				orderEvent(3, nil, nil, nil, int64(104), true),
			)
			if err != nil {
				t.Fatal(err)
			}
			got := res.Outputs()
			want := map[string]any{"events": int64(5), "keys": int64(3), "pending": int64(3), "skipped": int64(0), "deletes": int64(1), "verified": int64(3)}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("output %s = %v, want %v", k, got[k], v)
				}
			}
			rows := e.query("SELECT id, customer_id, amount_cents, status, _cdc_lsn, _cdc_deleted FROM " + e.db + ".orders_cdc FINAL ORDER BY id")
			if got, want := strings.Join(rows, "\n"), "1\t10\t550\tpaid\t102\t0\n2\t20\t700\tnew\t101\t0\n3\t0\t0\t\t104\t1"; got != want {
				t.Errorf("table\n got %s\nwant %s", got, want)
			}
			live := e.query("SELECT id, status FROM " + e.db + ".orders_live ORDER BY id")
			if got, want := strings.Join(live, "\n"), "1\tpaid\n2\tnew"; got != want {
				t.Errorf("live view\n got %s\nwant %s", got, want)
			}
			expected, _ := outputFile(t, cfg, ExpectedFile)
			pending, _ := outputFile(t, cfg, PendingFile)
			wantLines := `{"id": 1, "customer_id": 10, "amount_cents": 550, "status": "paid", "_cdc_lsn": 102, "_cdc_deleted": 0}
{"id": 2, "customer_id": 20, "amount_cents": 700, "status": "new", "_cdc_lsn": 101, "_cdc_deleted": 0}
{"id": 3, "customer_id": 0, "amount_cents": 0, "status": "", "_cdc_lsn": 104, "_cdc_deleted": 1}
`
			if expected != wantLines || pending != wantLines {
				t.Errorf("expected.jsonl\n%s\npending.jsonl\n%s\nwant\n%s", expected, pending, wantLines)
			}
			if s := res.Summary(); s != "5 captured events, 3 newer keys applied (1 deletes), 0 replayed/older keys skipped. Read-back verified; query "+e.db+".orders_live for current rows." {
				t.Errorf("summary %q", s)
			}
		})
	}
}

func TestApplyRefusalWritesNothing(t *testing.T) {
	e := newEnv(t, ordersMapping)
	e.setup()
	_, cfg, err := e.apply(false,
		orderEvent(1, int64(10), int64(500), "new", int64(100), false),
		orderEvent(2, int64(10), int64(500), strings.Repeat("x", 33), int64(101), false))
	testenv.WantError(t, err, outcome.Refused, ErrBadValue)
	if n := e.query("SELECT count() FROM " + e.db + ".orders_cdc"); n[0] != "0" {
		t.Errorf("refused batch wrote %s rows", n[0])
	}
	noOutputs(t, cfg)
}

func TestApplyEveryType(t *testing.T) {
	for _, f := range forms() {
		t.Run(f.name, func(t *testing.T) {
			e := newEnv(t, "testdata/types.mapping.yaml")
			e.setup()
			row2 := everythingRow(2, false)
			row2[1].Value = "B-ü"
			for i := range row2 {
				switch row2[i].Name {
				case "note":
					row2[i].Value = "héllo"
				case "qty":
					row2[i].Value = int64(-5)
				case "flag":
					row2[i].Value = false
				case "f32":
					row2[i].Value = math.NaN()
				case "f64":
					row2[i].Value = math.Inf(-1)
				}
			}
			res, cfg, err := e.apply(f.binary, everythingEvent(everythingRow(1, false), 5), everythingEvent(row2, 6))
			if err != nil {
				t.Fatal(err)
			}
			if res.Verified != 2 || res.Pending != 2 {
				t.Errorf("outputs %v", res.Outputs())
			}
			exp, _ := outputFile(t, cfg, ExpectedFile)
			if !strings.Contains(exp, `"f32": NaN, "f64": -Infinity`) || !strings.Contains(exp, `"u64": 18446744073709551615`) {
				t.Errorf("expected.jsonl:\n%s", exp)
			}
			// Bool is stored as UInt8 before ClickHouse 21.12.
			if got := e.query("SELECT type FROM system.columns WHERE database = ? AND table = 'everything_cdc' AND name = 'flag'", e.db); got[0] != "UInt8" && got[0] != "Bool" {
				t.Errorf("flag is %v", got)
			}
			// A second run reads every value back and finds the same payload:
			// the round trip through ClickHouse is exact for every type.
			res, _, err = e.apply(!f.binary, everythingEvent(everythingRow(1, false), 5), everythingEvent(row2, 6))
			if err != nil {
				t.Fatal(err)
			}
			if res.Skipped != 2 || res.Pending != 0 || res.Verified != 2 {
				t.Errorf("replay outputs %v", res.Outputs())
			}
		})
	}
}

func TestApplyWithoutSetup(t *testing.T) {
	e := newEnv(t, ordersMapping)
	_, cfg, err := e.apply(false, orderEvent(1, int64(1), int64(1), "x", int64(5), false))
	testenv.WantError(t, err, outcome.Config, ErrTargetMismatch, "run changesink cdc setup first")
	noOutputs(t, cfg)
}

func TestApplyEmptyBatch(t *testing.T) {
	for _, data := range [][]byte{nil, []byte("\n\n"), batchfile.IVM} {
		_, err := Apply(context.Background(), offlineConfig(t, loadMapping(t, ordersMapping), writeFile(t, "changes.ion", data)))
		if !errors.Is(err, ErrEmptyBatch) || outcome.Classify(err) != outcome.Refused {
			t.Errorf("%q: err = %v, want a refused ErrEmptyBatch (before any connection)", data, err)
		}
	}
}

func TestApplySameBatchTwice(t *testing.T) {
	for _, f := range forms() {
		t.Run(f.name, func(t *testing.T) {
			e := newEnv(t, ordersMapping)
			e.setup()
			batch := []any{
				orderEvent(1, int64(10), int64(500), "new", int64(100), false),
				orderEvent(2, int64(20), int64(700), "new", int64(101), false),
				orderEvent(2, nil, nil, nil, int64(102), true),
			}
			if _, _, err := e.apply(f.binary, batch...); err != nil {
				t.Fatal(err)
			}
			res, cfg, err := e.apply(f.binary, batch...)
			if err != nil {
				t.Fatal(err)
			}
			if res.Pending != 0 || res.Skipped != 2 || res.Verified != 2 || res.Deletes != 0 {
				t.Errorf("replay outputs %v", res.Outputs())
			}
			if p, ok := outputFile(t, cfg, PendingFile); !ok || p != "" {
				t.Errorf("pending.jsonl = %q (exists %v), want empty", p, ok)
			}
			if n := e.query("SELECT count() FROM " + e.db + ".orders_cdc"); n[0] != "2" {
				t.Errorf("a replay wrote rows: %s physical rows", n[0])
			}
		})
	}
}

func TestApplyTargetConflict(t *testing.T) {
	e := newEnv(t, ordersMapping)
	e.setup()
	if _, _, err := e.apply(false, orderEvent(1, int64(10), int64(500), "new", int64(100), false)); err != nil {
		t.Fatal(err)
	}
	_, cfg, err := e.apply(false, orderEvent(2, int64(1), int64(1), "x", int64(90), false),
		orderEvent(1, int64(10), int64(501), "new", int64(100), false))
	testenv.WantError(t, err, outcome.Refused, ErrTargetConflict)
	if want := "record 2 (key id=1, LSN 100): target has a different payload for the same key and LSN"; err.Error() != want {
		t.Errorf("error\n got %v\nwant %s", err, want)
	}
	if n := e.query("SELECT count() FROM " + e.db + ".orders_cdc"); n[0] != "1" {
		t.Errorf("the refused batch wrote rows (%s rows)", n[0])
	}
	noOutputs(t, cfg)
}

// TestOutputsLostAfterTheLedger: the working directory gone after the
// insert (so the output files cannot be published once the batch is
// applied, verified and in the ledger) was an internal error (exit 4,
// documented as "nothing was committed"). It is transient, says the batch
// is in, and the re-run is a replay that writes the files.
func TestOutputsLostAfterTheLedger(t *testing.T) {
	e := newEnv(t, ordersMapping)
	e.setup()
	path := writeFile(t, "changes.ion", encode(t, false, orderEvent(1, int64(10), int64(500), "new", int64(100), false)))
	cfg := e.config(path)
	cfg.hooks.afterInsert = func(context.Context) error { return os.RemoveAll(cfg.OutDir.Path) }
	_, err := Apply(context.Background(), cfg)
	testenv.WantError(t, err, outcome.Transient, nil, "the batch is applied, verified and recorded in the ledger, but an output file could not be published in WORKING_DIR",
		"re-run the batch: a replay writes nothing twice and writes expected.jsonl again, with an empty pending.jsonl (this run applied those rows)")
	cfg = e.config(path)
	res, err := Apply(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Pending != 0 || res.Skipped != 1 || res.Verified != 1 {
		t.Errorf("re-run: pending %d, skipped %d, verified %d; want a replay: 0, 1, 1", res.Pending, res.Skipped, res.Verified)
	}
	if got := string(testenv.ReadFile(t, filepath.Join(cfg.OutDir.Path, ExpectedFile))); strings.Count(got, "\n") != 1 || !strings.Contains(got, `"id": 1,`) {
		t.Errorf("the replay's %s = %q, want the batch's one row", ExpectedFile, got)
	}
	if got := string(testenv.ReadFile(t, filepath.Join(cfg.OutDir.Path, PendingFile))); got != "" {
		t.Errorf("the replay's %s = %q, want it empty", PendingFile, got)
	}
}

// TestApplyCrashAfterInsert stops a run after its insert (the test seam
// hooks.afterInsert) and re-runs the batch: it converges and verifies. It
// then inserts the same rows again, as a retried partial insert would, and
// checks FINAL collapses them.
func TestApplyCrashAfterInsert(t *testing.T) {
	e := newEnv(t, ordersMapping)
	e.setup()
	batch := encode(t, false,
		orderEvent(1, int64(10), int64(500), "new", int64(100), false),
		orderEvent(2, int64(20), int64(700), "new", int64(101), false),
		orderEvent(3, nil, nil, nil, int64(102), true))
	path := writeFile(t, "changes.ion", batch)
	crash := errors.New("killed after the insert")
	cfg := e.config(path)
	cfg.hooks.afterInsert = func(context.Context) error { return crash }
	if _, err := Apply(context.Background(), cfg); !errors.Is(err, crash) {
		t.Fatalf("err = %v", err)
	}
	noOutputs(t, cfg)
	if n := e.query("SELECT count() FROM " + e.db + ".orders_cdc"); n[0] != "3" {
		t.Fatalf("after the crash: %s rows, want 3", n[0])
	}

	// The retried insert of a partial run: the same rows once more.
	b, err := decodeFile(context.Background(), path, e.m, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.openTable(cfg.ClickHouse).insert(context.Background(), b.sorted()); err != nil {
		t.Fatal(err)
	}

	cfg = e.config(path)
	res, err := Apply(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Pending != 0 || res.Skipped != 3 || res.Verified != 3 {
		t.Errorf("re-run outputs %v", res.Outputs())
	}
	if n := e.query("SELECT count() FROM " + e.db + ".orders_cdc"); n[0] != "6" {
		t.Errorf("%s physical rows, want 6 (two inserts)", n[0])
	}
	if n := e.query("SELECT count() FROM " + e.db + ".orders_cdc FINAL"); n[0] != "3" {
		t.Errorf("%s rows under FINAL, want 3", n[0])
	}
	if n := e.query("SELECT count() FROM " + e.db + ".orders_live"); n[0] != "2" {
		t.Errorf("%s live rows, want 2", n[0])
	}
}

// TestApplyVerifyFailure lets another writer put a different row at the
// batch's LSN between the insert and the read-back: the verify refuses.
func TestApplyVerifyFailure(t *testing.T) {
	e := newEnv(t, ordersMapping)
	e.setup()
	cfg := e.config(writeFile(t, "changes.ion", encode(t, true,
		orderEvent(1, int64(10), int64(500), "new", int64(100), false),
		orderEvent(2, int64(20), int64(700), "new", int64(101), false))))
	cfg.hooks.afterInsert = func(ctx context.Context) error {
		return e.conn.Exec(ctx, "INSERT INTO "+e.db+".orders_cdc (id, customer_id, amount_cents, status, _cdc_lsn, _cdc_deleted) SELECT 2, 20, 700, 'other', 101, 0")
	}
	_, err := Apply(context.Background(), cfg)
	testenv.WantError(t, err, outcome.Refused, ErrVerify)
	if want := "record 2 (key id=2, LSN 101): ClickHouse read-back does not match the captured version: ClickHouse holds a different payload at this version"; err.Error() != want {
		t.Errorf("error\n got %v\nwant %s", err, want)
	}
	noOutputs(t, cfg)
}

// TestOutputFileErrorWritesNothing: expected.jsonl is written while the
// target is read; when it cannot be (a directory holds its name), the run
// fails before the insert, in both the plain and the TRUNCATE path: no row,
// no ledger row, the lock given back, no other output file.
func TestOutputFileErrorWritesNothing(t *testing.T) {
	for _, name := range []string{ExpectedFile, PendingFile} {
		for _, truncate := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/truncate=%v", name, truncate), func(t *testing.T) {
				e := newEnv(t, ordersMapping)
				e.setup()
				events := []any{orderEvent(1, int64(10), int64(500), "new", int64(100), false)}
				if truncate {
					events = append(events, iongen.Event(iongen.Struct{}, true, iongen.Metadata("TRUNCATE", iongen.Source("shop", "public", "orders", int64(200), 5, "false"))))
				}
				cfg := e.config(writeFile(t, "changes.ion", encode(t, false, events...)))
				if err := os.Mkdir(filepath.Join(cfg.OutDir.Path, name), 0o755); err != nil {
					t.Fatal(err)
				}
				_, err := Apply(context.Background(), cfg)
				if err == nil || !strings.Contains(err.Error(), "is a directory") {
					t.Fatalf("err = %v, want the output file's directory named", err)
				}
				for _, q := range []string{"SELECT count() FROM " + e.db + ".orders_cdc", "SELECT count() FROM " + e.db + ".orders_cdc_ledger WHERE kind = 'batch'",
					"SELECT count() FROM system.tables WHERE database = '" + e.db + "' AND name LIKE 'orders_cdc_lock%'"} {
					if n := e.query(q); n[0] != "0" {
						t.Errorf("%s: %s", q, n[0])
					}
				}
				entries, _ := os.ReadDir(cfg.OutDir.Path)
				if len(entries) != 1 {
					t.Errorf("the failed run left %d entries in the output directory, want only the directory it found", len(entries))
				}
			})
		}
	}
}

// TestLedgerDroppedDuringTheRun: the ledger dropped by hand while a run
// applied its batch: the insert and the verify passed, the ledger row
// failed. That was a configuration error (exit 2, "run changesink cdc
// setup first") with the batch's rows committed, which exit 2 does not
// say; apply makes the ledger itself. It is transient (exit 3: the rows
// are in, not recorded) and a plain re-run converges.
func TestLedgerDroppedDuringTheRun(t *testing.T) {
	e := newEnv(t, ordersMapping)
	e.setup()
	path := writeFile(t, "changes.ion", encode(t, false,
		orderEvent(1, int64(10), int64(500), "new", int64(100), false),
		orderEvent(2, int64(20), int64(700), "new", int64(101), false)))
	cfg := e.config(path)
	cfg.hooks.afterInsert = func(ctx context.Context) error {
		return e.conn.Exec(ctx, "DROP TABLE "+qualified(e.db, ledgerName(e.m)))
	}
	_, err := Apply(context.Background(), cfg)
	if err == nil {
		t.Fatal("succeeded without its ledger row")
	}
	testenv.CheckError(t, err, outcome.Transient, nil, "was dropped during this run", "re-run")
	if strings.Contains(err.Error(), "setup first") {
		t.Errorf("a dropped ledger is remade by apply, yet the error says to run setup: %v", err)
	}
	noOutputs(t, cfg)
	e.replays(path, 2)
	if got := e.query("SELECT kind FROM " + qualified(e.db, ledgerName(e.m)) + " ORDER BY seq"); strings.Join(got, ",") != "baseline,batch" {
		t.Errorf("ledger %v", got)
	}
}

// TestConfigValidate: settings no run can succeed with are configuration
// errors before any connection. A ClickHouse timeout under a second failed
// every call as transient ("a retry of the run converges"), which no retry
// does.
func TestConfigValidate(t *testing.T) {
	m := loadMapping(t, ordersMapping)
	ok := Config{Mapping: m, ClickHouse: ClickHouse{URL: "clickhouse://127.0.0.1:9000/default"}, BatchFile: "changes.ion"}
	for _, tt := range []struct {
		name string
		edit func(*Config)
		want string // "" when valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"one second", func(c *Config) { c.ClickHouse.Timeout = time.Second }, ""},
		{"negative timeout", func(c *Config) { c.ClickHouse.Timeout = -time.Second }, "negative ClickHouse timeout"},
		{"a millisecond", func(c *Config) { c.ClickHouse.Timeout = time.Millisecond }, "CDC_CLICKHOUSE_TIMEOUT 1ms is under 1s"},
		{"65 workers", func(c *Config) { c.Workers = 65 }, "workers 65 outside 0..64"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.edit(&c)
			err := c.Validate(true)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			testenv.WantError(t, err, outcome.Config, ErrConfig, tt.want)
		})
	}
}
