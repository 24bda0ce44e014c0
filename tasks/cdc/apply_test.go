package cdc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"

	"github.com/changesink/changesink/internal/iongen"
	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
	"github.com/changesink/changesink/tasks/cdc/internal/batchfile"
)

//changesink:per-server
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
			rows := e.query(e.finalSQL("id, customer_id, amount_cents, status, _cdc_lsn, _cdc_deleted", ""))
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
	wantError(t, err, outcome.Refused, change.ErrBadValue)
	if n := e.query("SELECT count() FROM " + e.db + ".orders_cdc"); n[0] != "0" {
		t.Errorf("refused batch wrote %s rows", n[0])
	}
	noOutputs(t, cfg)
}

//changesink:per-server
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

//changesink:per-server
func TestApplyWithoutSetup(t *testing.T) {
	e := newEnv(t, ordersMapping)
	_, cfg, err := e.apply(false, orderEvent(1, int64(1), int64(1), "x", int64(5), false))
	wantError(t, err, outcome.Config, change.ErrTargetMismatch, "run changesink cdc setup first")
	noOutputs(t, cfg)
}

func TestApplyEmptyBatch(t *testing.T) {
	for _, data := range [][]byte{nil, []byte("\n\n"), batchfile.IVM} {
		_, err := testApply(context.Background(), offlineConfig(t, loadMapping(t, ordersMapping), writeFile(t, "changes.ion", data)))
		if !errors.Is(err, change.ErrEmptyBatch) || outcome.Classify(err) != outcome.Refused {
			t.Errorf("%q: err = %v, want a refused ErrEmptyBatch (before any connection)", data, err)
		}
	}
}

//changesink:per-server
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
	wantError(t, err, outcome.Refused, change.ErrTargetConflict)
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
	cfg.hooks.AfterInsert = func(context.Context) error { return os.RemoveAll(cfg.Dir.Path) }
	_, err := testApply(context.Background(), cfg)
	wantError(t, err, outcome.Transient, errNotPublished, "the batch is applied, verified and recorded in the ledger, but the output files are not published: publish the output files in WORKING_DIR",
		"Re-run the batch: a replay writes nothing twice and writes expected.jsonl again, with an empty pending.jsonl (this run applied those rows)")
	cfg = e.config(path)
	res, err := testApply(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Pending != 0 || res.Skipped != 1 || res.Verified != 1 {
		t.Errorf("re-run: pending %d, skipped %d, verified %d; want a replay: 0, 1, 1", res.Pending, res.Skipped, res.Verified)
	}
	if got := string(testenv.ReadFile(t, filepath.Join(cfg.Dir.Path, ExpectedFile))); strings.Count(got, "\n") != 1 || !strings.Contains(got, `"id": 1,`) {
		t.Errorf("the replay's %s = %q, want the batch's one row", ExpectedFile, got)
	}
	if got := string(testenv.ReadFile(t, filepath.Join(cfg.Dir.Path, PendingFile))); got != "" {
		t.Errorf("the replay's %s = %q, want it empty", PendingFile, got)
	}
}

// TestApplyCrashAfterInsert stops a run after its insert (the test seam
// hooks.afterInsert) and re-runs the batch: it converges and verifies. It
// then inserts the same rows again, as a retried partial insert would, and
// checks FINAL collapses them.
//
//changesink:per-server
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
	cfg.hooks.AfterInsert = func(context.Context) error { return crash }
	if _, err := testApply(context.Background(), cfg); !errors.Is(err, crash) {
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
	tbl := e.openTable(cfg.ClickHouse)
	lk, err := tbl.Lock(context.Background(), testLockTiming, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := tbl.Insert(context.Background(), b.Sorted(), lk.Fence()); err != nil {
		t.Fatal(err)
	}
	if err := lk.Release(context.Background()); err != nil {
		t.Fatal(err)
	}

	cfg = e.config(path)
	res, err := testApply(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Pending != 0 || res.Skipped != 3 || res.Verified != 3 {
		t.Errorf("re-run outputs %v", res.Outputs())
	}
	if n := e.query("SELECT count() FROM " + e.db + ".orders_cdc"); n[0] != "6" {
		t.Errorf("%s physical rows, want 6 (two inserts)", n[0])
	}
	if n := e.query("SELECT count() FROM (" + e.finalSQL("id, _cdc_lsn", "") + ")"); n[0] != "3" {
		t.Errorf("%s rows under FINAL, want 3", n[0])
	}
	if n := e.query("SELECT count() FROM " + e.db + ".orders_live"); n[0] != "2" {
		t.Errorf("%s live rows, want 2", n[0])
	}
}

// TestApplyVerifyFailure lets another writer put a different row at the
// batch's LSN between the insert and the read-back: the verify refuses.
//
//changesink:per-server
func TestApplyVerifyFailure(t *testing.T) {
	e := newEnv(t, ordersMapping)
	e.setup()
	cfg := e.config(writeFile(t, "changes.ion", encode(t, true,
		orderEvent(1, int64(10), int64(500), "new", int64(100), false),
		orderEvent(2, int64(20), int64(700), "new", int64(101), false))))
	cfg.hooks.AfterInsert = func(ctx context.Context) error {
		return e.conn.Exec(ctx, "INSERT INTO "+e.db+".orders_cdc (id, customer_id, amount_cents, status, _cdc_lsn, _cdc_deleted) SELECT 2, 20, 700, 'other', 101, 0")
	}
	_, err := testApply(context.Background(), cfg)
	wantError(t, err, outcome.Refused, change.ErrVerify)
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
				if err := os.Mkdir(filepath.Join(cfg.Dir.Path, name), 0o755); err != nil {
					t.Fatal(err)
				}
				_, err := testApply(context.Background(), cfg)
				if err == nil || !strings.Contains(err.Error(), "is a directory") {
					t.Fatalf("err = %v, want the output file's directory named", err)
				}
				for _, q := range []string{"SELECT count() FROM " + e.db + ".orders_cdc", "SELECT count() FROM " + e.db + ".orders_cdc_ledger WHERE kind = 'batch'",
					"SELECT count() FROM system.tables WHERE database = '" + e.db + "' AND name LIKE 'orders_cdc_lock%'"} {
					if n := e.query(q); n[0] != "0" {
						t.Errorf("%s: %s", q, n[0])
					}
				}
				entries, _ := os.ReadDir(cfg.Dir.Path)
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
//
//changesink:per-server
func TestLedgerDroppedDuringTheRun(t *testing.T) {
	e := newEnv(t, ordersMapping)
	e.setup()
	path := writeFile(t, "changes.ion", encode(t, false,
		orderEvent(1, int64(10), int64(500), "new", int64(100), false),
		orderEvent(2, int64(20), int64(700), "new", int64(101), false)))
	cfg := e.config(path)
	cfg.hooks.AfterInsert = func(ctx context.Context) error {
		return e.conn.Exec(ctx, "DROP TABLE "+mapping.Qualified(e.db, mapping.LedgerName(e.m)))
	}
	_, err := testApply(context.Background(), cfg)
	if err == nil {
		t.Fatal("succeeded without its ledger row")
	}
	checkError(t, err, outcome.Transient, nil, "was dropped during this run", "re-run")
	if strings.Contains(err.Error(), "setup first") {
		t.Errorf("a dropped ledger is remade by apply, yet the error says to run setup: %v", err)
	}
	noOutputs(t, cfg)
	e.replays(path, 2)
	if got := e.query("SELECT kind FROM " + mapping.Qualified(e.db, mapping.LedgerName(e.m)) + " ORDER BY seq"); strings.Join(got, ",") != "baseline,batch" {
		t.Errorf("ledger %v", got)
	}
}

// TestApplyOlderBatchAfterNewer: a batch that was never applied (not in
// the ledger) and whose every key is older than the target is refused, not
// skipped as older, and changes nothing. A batch that also holds a key the
// target lacks applies that key and skips the older ones as replays (issue
// 28: the flow's own recovery, a failed batch replayed after a newer one,
// must not lose the keys only it created); a batch mixing older and newer
// keys applies the newer ones.
//
//changesink:per-server
func TestApplyOlderBatchAfterNewer(t *testing.T) {
	e := newEnv(t, ordersMapping)
	e.setup()
	if _, _, err := e.apply(false, orderEvent(1, int64(10), int64(900), "shipped", int64(200), false),
		orderEvent(2, nil, nil, nil, int64(201), true)); err != nil {
		t.Fatal(err)
	}
	before := e.query("SELECT id, amount_cents, status, _cdc_lsn, _cdc_deleted FROM " + e.db + ".orders_cdc ORDER BY id, _cdc_lsn")
	_, cfg, err := e.apply(true, orderEvent(1, int64(10), int64(500), "new", int64(100), false),
		orderEvent(2, int64(20), int64(1), "new", int64(150), false))
	wantError(t, err, outcome.Refused, change.ErrWentBackwards)
	checkError(t, err, outcome.Refused, change.ErrWentBackwards, "record 1 (key id=1, LSN 100)", "holds version 200 of this key",
		"all 2 keys of the batch are older", "rebuild the target", "do not apply it")
	noOutputs(t, cfg)
	if after := e.query("SELECT id, amount_cents, status, _cdc_lsn, _cdc_deleted FROM " + e.db + ".orders_cdc ORDER BY id, _cdc_lsn"); strings.Join(after, "\n") != strings.Join(before, "\n") {
		t.Errorf("the refused batch changed the target:\n%s\nwas\n%s", after, before)
	}
	res, _, err := e.apply(true, orderEvent(1, int64(10), int64(500), "new", int64(100), false),
		orderEvent(3, int64(30), int64(3), "new", int64(160), false))
	if err != nil {
		t.Fatalf("a batch with a key the target lacks: %v", err)
	}
	if res.Pending != 1 || res.Skipped != 1 || res.Verified != 2 {
		t.Errorf("outputs %v, want key 3 applied and key 1 skipped", res.Outputs())
	}
	res, _, err = e.apply(true, orderEvent(1, int64(10), int64(500), "new", int64(100), false),
		orderEvent(2, int64(20), int64(1), "new", int64(250), false),
		orderEvent(3, int64(30), int64(3), "new", int64(160), false))
	if err != nil {
		t.Fatal(err)
	}
	if res.Pending != 1 || res.Skipped != 2 || res.Verified != 3 {
		t.Errorf("outputs %v", res.Outputs())
	}
	rows := e.query(e.finalSQL("id, amount_cents, status, _cdc_lsn, _cdc_deleted", ""))
	if got, want := strings.Join(rows, "\n"), "1\t900\tshipped\t200\t0\n2\t1\tnew\t250\t0\n3\t3\tnew\t160\t0"; got != want {
		t.Errorf("table\n got %s\nwant %s", got, want)
	}
}

// TestSourceLSNReset: after a restore or a migration every change is
// "older" than the target: the batch is refused, not skipped, and nothing
// changes; the refusal says what to do.
func TestSourceLSNReset(t *testing.T) {
	e := newEnv(t, ordersMapping)
	e.setup()
	if _, _, err := e.apply(false, orderEvent(1, int64(10), int64(100), "old", int64(80000000), false)); err != nil {
		t.Fatal(err)
	}
	before := e.physical()
	_, cfg, err := e.apply(true, orderEvent(1, int64(10), int64(100), "after", int64(2100), false))
	wantError(t, err, outcome.Refused, change.ErrWentBackwards)
	checkError(t, err, outcome.Refused, change.ErrWentBackwards,
		"record 1 (key id=1, LSN 2100): versions went backwards: was the source restored or migrated? "+e.db+".orders_cdc holds version 80000000",
		"never applied", `from connector postgresql "kestra_" (Debezium 3.2.1.Final) on database shop`,
		e.db+".orders_cdc_ledger row 1 (batch applied", "rebuild the target", "a new slotName and stateName")
	noOutputs(t, cfg)
	if after := e.physical(); after != before {
		t.Errorf("the refused batch changed the target:\n%s\nwas\n%s", after, before)
	}
	// The applied batch again is a replay: skipped and verified, as before.
	res, _, err := e.apply(true, orderEvent(1, int64(10), int64(100), "old", int64(80000000), false))
	if err != nil || res.Skipped != 1 || res.Verified != 1 {
		t.Fatalf("replay: %v, %v", res, err)
	}
}

// TestSourceLSNResetOverSeedRows: the same on a target the seed flow
// filled before changesink (no ledger rows of its own): the ledger gets a
// baseline, and the per-key rule holds.
func TestSourceLSNResetOverSeedRows(t *testing.T) {
	e := newEnv(t, ordersMapping)
	e.setup()
	if err := e.conn.Exec(context.Background(), "INSERT INTO "+e.db+".orders_cdc (id, customer_id, amount_cents, status, _cdc_lsn, _cdc_deleted) SELECT 1, 10, 100, 'old', 80000000, 0"); err != nil {
		t.Fatal(err)
	}
	_, _, err := e.apply(false, orderEvent(1, int64(10), int64(100), "after", int64(2100), false))
	if !errors.Is(err, change.ErrWentBackwards) || !strings.Contains(err.Error(), "the rows the target held when its ledger was made") {
		t.Fatalf("err = %v, want ErrWentBackwards naming the baseline", err)
	}
	if got := e.query("SELECT kind, high_version FROM " + e.db + ".orders_cdc_ledger"); strings.Join(got, "\n") != "baseline\t80000000" {
		t.Errorf("ledger %v", got)
	}
}

// snapshotWithoutLedger returns the overlap scenario's target after a
// snapshot batch (keys 1 and 2 at LSN 1000) whose ledger was then dropped
// by hand: the baseline of the overlap tests without the snapshot's LSN.
func snapshotWithoutLedger(t *testing.T) *env {
	t.Helper()
	e := scenarioEnv(t, "overlap_stream")
	if _, _, err := e.apply(true, overlapEvent("READ", 1, "snap", 1000, "first", ""), overlapEvent("READ", 2, "snap2", 1000, "last", "")); err != nil {
		t.Fatal(err)
	}
	if err := e.conn.Exec(context.Background(), "DROP TABLE "+mapping.Qualified(e.db, mapping.LedgerName(e.m))); err != nil {
		t.Fatal(err)
	}
	return e
}

// TestOverlapAfterTheLedgerWasDropped: the ledger keeps the snapshot's
// LSN, the floor of the first transaction after it (TestOverlapAcrossBatches).
// With the ledger dropped by hand after the snapshot batch, the next run
// made a baseline without it: the overlapping UPDATE of key 1 (LSN 950,
// below the snapshot's 1000) was skipped as older while key 2 of the same
// transaction was applied, exit 0 and verified: key 1's change was lost.
// Such a row (no lsn_commit, no snapshot in the batch or the ledger, older
// than the target) is refused, naming the key and what to do.
func TestOverlapAfterTheLedgerWasDropped(t *testing.T) {
	e := snapshotWithoutLedger(t)
	before := e.physical()
	_, cfg, err := e.apply(false, overlapEvent("UPDATE", 1, "after", 950, "false", ""), overlapEvent("UPDATE", 2, "after2", 1010, "false", ""))
	if err == nil {
		t.Fatalf("applied; live rows %s", e.liveJSON())
	}
	wantError(t, err, outcome.Refused, change.ErrWentBackwards)
	checkError(t, err, outcome.Refused, change.ErrWentBackwards, "record 1 (key id=1, LSN 950)", "no lsn_commit", "snapshot", "holds version 1000")
	noOutputs(t, cfg)
	if after := e.physical(); after != before {
		t.Errorf("the refused batch changed the target:\n%s\nwas\n%s", after, before)
	}
}

// TestOlderWithoutSequenceOnABaseline: the refusal above needs the
// trigger's word that the change is the first transaction after a snapshot
// (a sequence without lsn_commit). A batch without sequences (hand-made,
// like the seed flow's tests) is versioned by its LSNs, as the seed does:
// on the same baseline, the older key is skipped and the newer applied.
func TestOlderWithoutSequenceOnABaseline(t *testing.T) {
	e := snapshotWithoutLedger(t)
	res, _, err := e.apply(false,
		withSource(overlapEvent("UPDATE", 1, "after", 950, "false", ""), "sequence", nil),
		withSource(overlapEvent("UPDATE", 2, "after2", 1010, "false", ""), "sequence", nil))
	if err != nil {
		t.Fatal(err)
	}
	if res.Pending != 1 || res.Skipped != 1 {
		t.Errorf("outputs %v, want key 1 skipped and key 2 applied", res.Outputs())
	}
	if got, want := e.liveJSON(), `{"id":1,"v":"snap"}`+"\n"+`{"id":2,"v":"after2"}`+"\n"; got != want {
		t.Errorf("live rows %s, want %s", got, want)
	}
}
