package cdc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/target"

	"github.com/changesink/changesink/internal/kestra"
	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
	"github.com/changesink/changesink/tasks/cdc/internal/testhook"
)

// TestConcurrentCDCWriters: two cdc apply runs on one target at once, with
// the same key and LSN and different payloads: exactly one applies, the
// other waits for the lock and then refuses (the target holds the other
// payload at that version). With the same batch, the second is a replay.
// The first holds the lock a while (hooks.Locked) so the second surely
// waits.
//
//changesink:per-server
func TestConcurrentCDCWriters(t *testing.T) {
	for _, same := range []bool{false, true} {
		t.Run(map[bool]string{false: "different payloads", true: "same batch"}[same], func(t *testing.T) {
			e := newEnv(t, ordersMapping)
			e.setup()
			batches := []string{
				writeFile(t, "a.ion", encode(t, false, orderEvent(1, int64(10), int64(500), "from A", int64(100), false))),
				writeFile(t, "b.ion", encode(t, true, orderEvent(1, int64(10), int64(500), "from B", int64(100), false))),
			}
			if same {
				batches[1] = batches[0]
			}
			held := make(chan struct{})
			var once sync.Once
			var wg sync.WaitGroup
			results := make([]*Result, 2)
			errs := make([]error, 2)
			for i := range 2 {
				cfg := e.config(batches[i])
				cfg.hooks.Locked = func(context.Context) error {
					once.Do(func() { close(held) })
					time.Sleep(time.Second) // the other run is waiting meanwhile
					return nil
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					if i == 1 {
						<-held
					}
					results[i], errs[i] = testApply(context.Background(), cfg)
				}()
			}
			wg.Wait()
			if errs[0] != nil {
				t.Fatalf("the first run: %v", errs[0])
			}
			if results[0].Pending != 1 {
				t.Errorf("the first run: %v", results[0].Outputs())
			}
			if same {
				if errs[1] != nil || results[1].Pending != 0 || results[1].Skipped != 1 || results[1].Verified != 1 {
					t.Errorf("the second run of the same batch: %v, %v", results[1], errs[1])
				}
			} else if !errors.Is(errs[1], change.ErrTargetConflict) || outcome.Classify(errs[1]) != outcome.Refused {
				t.Errorf("the second run: %v, want a refused ErrTargetConflict", errs[1])
			}
			if got := e.query("SELECT status FROM " + e.db + ".orders_cdc FINAL"); len(got) != 1 || got[0] != "from A" {
				t.Errorf("target %v, want the first run's row only", got)
			}
			if n := e.query("SELECT count() FROM " + e.db + ".orders_cdc"); n[0] != "1" {
				t.Errorf("%s physical rows, want 1 (one writer)", n[0])
			}
			if got := e.query("SELECT name FROM system.tables WHERE database = ? AND name LIKE 'orders_cdc_lock%'", e.db); len(got) != 0 {
				t.Errorf("lock tables left: %v", got)
			}
		})
	}
}

// mustLock takes tbl's lock or fails the test.
func mustLock(t *testing.T, tbl *target.Table, timing target.LockTiming) *target.Lock {
	t.Helper()
	l, err := tbl.Lock(context.Background(), timing, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// proxiedTable opens the env's target as apply does, through a proxy in
// front of its server, with the call timeout given.
func (e *env) proxiedTable(timeout time.Duration) (*testenv.Proxy, *target.Table) {
	e.t.Helper()
	p, via := e.proxied()
	return p, e.openTable(target.ClickHouse{URL: via, Timeout: timeout})
}

// lockTarget sets a target up and returns its table, for the lock's tests.
func lockTarget(t *testing.T) *target.Table {
	e := newEnv(t, ordersMapping)
	e.setup()
	return e.lockedTable()
}

// abandon stops a held lock's heartbeat without releasing it: what the
// server sees of a run killed while holding it.
func abandon(l *target.Lock) {
	close(l.Stop)
	<-l.Done
	l.Stop = nil
}

// TestLockWaitsThenTimesOut: a live holder keeps the lock: a second run
// waits its whole wait and fails transient, naming the holder.
func TestLockWaitsThenTimesOut(t *testing.T) {
	tbl := lockTarget(t)
	timing := testLockTiming
	a := mustLock(t, tbl, timing)
	defer a.Release(context.Background())
	timing.Wait = 2 * time.Second
	var logs bytes.Buffer
	_, err := tbl.Lock(context.Background(), timing, slog.New(slog.NewTextHandler(&logs, nil)))
	wantError(t, err, outcome.Transient, change.ErrTargetLocked)
	host, _ := os.Hostname()
	holder := fmt.Sprintf("holder %s on host %s, pid %d", a.ID, host, os.Getpid())
	if !strings.Contains(err.Error(), holder) {
		t.Errorf("message does not name the holder (%s): %v", holder, err)
	}
	// One line when the wait starts, not one per try.
	if lines := strings.Split(strings.TrimSpace(logs.String()), "\n"); len(lines) != 1 || !strings.Contains(lines[0], "level=INFO") ||
		!strings.Contains(lines[0], "cdc: the lock "+a.Name+" is taken ("+holder) ||
		!strings.Contains(lines[0], fmt.Sprintf("waiting up to %s, and breaking it once its last heartbeat is over %s old", timing.Wait, timing.Stale)) {
		t.Errorf("log, want one INFO line saying the run waits for %s:\n%s", holder, logs.String())
	}
	if err := a.Check(context.Background()); err != nil {
		t.Errorf("the holder lost its lock: %v", err)
	}
}

// TestLockWaitSaysWhatItWaitsFor: a run waiting for a lock is never
// silent longer than Say: after the line that starts the wait, a line each
// Say names the holder, when its lock is broken unless it beats again, and
// when the run gives up; a killed holder's countdown runs out and its lock
// is broken, with a WARN.
func TestLockWaitSaysWhatItWaitsFor(t *testing.T) {
	tbl := lockTarget(t)
	timing := testLockTiming
	timing.Stale, timing.Wait, timing.Say = 3*time.Second, 10*time.Second, time.Second
	a := mustLock(t, tbl, timing)
	abandon(a) // killed: its heartbeats stop, its lock stays
	var logs bytes.Buffer
	b, err := tbl.Lock(context.Background(), timing, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(context.Background())
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	var still int
	for _, l := range lines {
		if strings.Contains(l, "cdc: still waiting for the lock "+a.Name+" after ") && strings.Contains(l, "holder "+a.ID) &&
			strings.Contains(l, "unless it beats again, and this run gives up in ") {
			still++
		}
	}
	if len(lines) < 3 || !strings.Contains(lines[0], "is taken") || still < 1 ||
		!strings.Contains(lines[len(lines)-1], "level=WARN") || !strings.Contains(lines[len(lines)-1], "cdc: broke the lock "+a.Name) {
		t.Errorf("log, want the wait's start, a line each second, then the broken lock:\n%s", logs.String())
	}
}

// TestABrokenHolderStaysOut: holder R is cut off from ClickHouse (a
// frozen proxy: its heartbeats wait in the network) past the stale bound;
// W breaks R's lock and takes it; then R's connection comes back. R's
// heartbeats, the held ones among them, used to land in W's lock, so R's
// check passed: two holders, and R's release then dropped W's live lock.
// Now R's heartbeats land only in a lock that holds R's rows, R's check
// says it lost the lock, R's release leaves W's lock alone, and W keeps it.
func TestABrokenHolderStaysOut(t *testing.T) {
	e := newEnv(t, ordersMapping)
	e.setup()
	p, viaProxy := e.proxiedTable(2 * time.Second)
	timing := testLockTiming
	timing.Stale = 2 * time.Second
	r := mustLock(t, viaProxy, timing)
	p.Freeze()
	time.Sleep(timing.Stale + 1500*time.Millisecond) // R's last heartbeat is stale by the server's clock
	w := mustLock(t, e.lockedTable(), timing)
	defer w.Release(context.Background())
	p.Thaw()
	time.Sleep(10 * timing.Beat) // R's held and new heartbeats reach the server
	if n := e.query("SELECT count() FROM "+w.Name+" WHERE holder = ?", r.ID); n[0] != "0" {
		t.Errorf("%s rows of the broken holder in the new holder's lock, want none", n[0])
	}
	if err := r.Check(context.Background()); !errors.Is(err, change.ErrTargetLocked) {
		t.Errorf("the broken holder's check: %v, want ErrTargetLocked (two holders)", err)
	}
	if err := r.Release(context.Background()); err != nil {
		t.Errorf("the broken holder's release: %v", err)
	}
	if err := w.Check(context.Background()); err != nil {
		t.Errorf("the new holder after the broken holder's release: %v", err)
	}
}

// TestApplyBreaksAKilledHolder kills (SIGKILL) a real process while it
// holds the target's lock: the test binary, re-run as a child that applies
// a batch and stops once locked. The next apply breaks the lock after the
// stale bound and converges; the killed run left no row and no ledger row.
func TestApplyBreaksAKilledHolder(t *testing.T) {
	e := newEnv(t, ordersMapping)
	e.setup()
	path := writeFile(t, "changes.ion", encode(t, false, orderEvent(1, int64(10), int64(500), "new", int64(100), false)))
	ready := filepath.Join(t.TempDir(), "ready")
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "CDC_TEST_CHILD_HOLD="+ready, "CDC_TEST_CHILD_BATCH="+path, "CDC_TEST_CHILD_DB="+e.db)
	child := testenv.Start(t, cmd)
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the child never held the lock:\n%s", child.Kill(t).Output())
		}
		time.Sleep(20 * time.Millisecond)
	}
	child.Kill(t)
	if got := e.query("SELECT holder FROM " + e.db + ".orders_cdc_lock LIMIT 1"); len(got) != 1 {
		t.Fatalf("the killed run's lock is not there: %v", got)
	}
	res, _, err := e.apply(true, orderEvent(1, int64(10), int64(500), "new", int64(100), false))
	if err != nil {
		t.Fatalf("the run after the kill: %v", err)
	}
	if res.Pending != 1 || res.Verified != 1 {
		t.Errorf("outputs %v", res.Outputs())
	}
	if got := e.query("SELECT count() FROM " + e.db + ".orders_cdc_ledger WHERE kind = 'batch'"); got[0] != "1" {
		t.Errorf("%s ledger rows, want 1 (the killed run wrote none)", got[0])
	}
}

// TestApplyBreaksAnEmptyLock: a lock table without rows is what a
// ClickHouse restart leaves of a held lock (engine Memory keeps the table,
// not its rows), and what a run cut between creating the lock and its
// first heartbeat left. It was never broken: breaking renames the lock
// aside and measures it again, and a rename resets the creation time an
// empty lock is measured by, so the renamed lock always looked fresh and
// was given back; every run then waited out its wait and failed transient
// (exit 3) until someone dropped the table. Now it is broken after the
// stale bound and the run converges; taking the lock creates it with its
// holder row in one statement, so no run leaves an empty one.
//
//changesink:per-server
func TestApplyBreaksAnEmptyLock(t *testing.T) {
	e := newEnv(t, ordersMapping)
	e.setup()
	lock := mapping.Qualified(e.db, mapping.LockName(e.m))
	if err := e.conn.Exec(context.Background(), "CREATE TABLE "+lock+" (holder String, host String, pid UInt32, beat DateTime) ENGINE = Memory"); err != nil {
		t.Fatal(err)
	}
	res, _, err := e.apply(true, orderEvent(1, int64(10), int64(500), "new", int64(100), false))
	if err != nil {
		t.Fatalf("the run after the restart: %v", err)
	}
	if res.Pending != 1 || res.Verified != 1 {
		t.Errorf("outputs %v", res.Outputs())
	}
	if got := e.query("SELECT name FROM system.tables WHERE database = ? AND name LIKE 'orders_cdc_lock%'", e.db); len(got) != 0 {
		t.Errorf("lock tables left: %v", got)
	}
}

// holdingChild applies the batch and, once it holds the lock, says so and
// waits to be killed.
func holdingChild() {
	m, err := mapping.Load(ordersMapping)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	m.Target.Database, m.Target.CreateDatabase = os.Getenv("CDC_TEST_CHILD_DB"), false
	dir, err := os.MkdirTemp("", "cdc-child")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	cfg := testRun{Config{Mapping: m, ClickHouse: target.ClickHouse{URL: os.Getenv("CHANGESINK_TEST_CLICKHOUSE"), Timeout: time.Minute},
		BatchFile: os.Getenv("CDC_TEST_CHILD_BATCH")}, Env{Dir: kestra.Dir{Path: dir}, hooks: testhook.Hooks{LockTiming: testLockTiming}}}
	cfg.hooks.Locked = func(context.Context) error {
		if err := os.WriteFile(os.Getenv("CDC_TEST_CHILD_HOLD"), nil, 0o644); err != nil {
			return err
		}
		time.Sleep(time.Hour)
		return nil
	}
	_, err = testApply(context.Background(), cfg)
	fmt.Fprintln(os.Stderr, "the child was not killed:", err)
}

// TestStoppedHolder (issue 28 case 4): a holder frozen past the lock's
// stale time (here: its connection frozen by a proxy while it waits at a
// hook) at each point of its run — right after taking the lock, after the
// lock check before its insert, after the one before its ledger row —
// while another run breaks its lock and applies a newer batch. Resumed,
// the frozen holder writes nothing (its writes are fenced by the lock) and
// fails saying it lost the lock (transient), not "went backwards"; the
// ledger holds one row per sequence number, and the target the newer
// batch's rows.
//
//changesink:per-server
func TestStoppedHolder(t *testing.T) {
	const keys = 1000
	batchAt := func(lsn int64, status string, create bool) []any {
		evs := make([]any, keys)
		for i := range keys {
			row := orderRow(int64(i+1), int64(1), lsn, status)
			if create {
				evs[i] = createEvent(row, lsn+int64(i))
			} else {
				evs[i] = withSource(orderEvent(int64(i+1), int64(1), lsn, status, lsn+int64(i), false), "txId", lsn)
			}
		}
		return evs
	}
	for _, point := range []string{"locked", "insert", "ledger"} {
		t.Run(point, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t, ordersMapping)
			e.setup()
			if _, _, err := e.apply(true, batchAt(100, "Z", true)...); err != nil {
				t.Fatal(err)
			}
			timing := testLockTiming
			timing.Stale = 2 * time.Second
			p, viaProxy := e.proxied()
			a := e.config(writeFile(t, "a.ion", encode(t, true, batchAt(10_000, "A", false)...)))
			a.ClickHouse.URL = viaProxy
			a.hooks.LockTiming = timing
			b := e.config(writeFile(t, "b.ion", encode(t, true, batchAt(20_000, "B", false)...)))
			b.hooks.LockTiming = timing
			var bErr error
			frozen := false
			freeze := func(ctx context.Context) error {
				frozen = true
				p.Freeze()
				time.Sleep(timing.Stale + 1500*time.Millisecond) // A's last heartbeat is stale by the server's clock
				_, bErr = testApply(ctx, b)
				p.Thaw()
				return nil
			}
			if point == "locked" {
				a.hooks.Locked = freeze
			} else {
				a.hooks.Checked = func(ctx context.Context, write string) error {
					if write == point {
						return freeze(ctx)
					}
					return nil
				}
			}
			_, err := testApply(ctx, a)
			if !frozen || bErr != nil {
				t.Fatalf("frozen %v; the run that broke the lock: %v", frozen, bErr)
			}
			wantError(t, err, outcome.Transient, change.ErrTargetLocked)
			if strings.Contains(err.Error(), "backwards") {
				t.Errorf("the frozen holder says %v", err)
			}
			noOutputs(t, a)
			ledger := mapping.Qualified(e.db, mapping.LedgerName(e.m))
			if got := e.query("SELECT seq, count() FROM " + ledger + " GROUP BY seq ORDER BY seq"); strings.Join(got, ",") != "1\t1,2\t1" {
				t.Errorf("ledger rows per seq: %v, want seq 1 (Z) and 2 (B), one each", got)
			}
			if got := e.query("SELECT status, count() FROM " + e.db + ".orders_cdc FINAL GROUP BY status"); strings.Join(got, ",") != fmt.Sprintf("B\t%d", keys) {
				t.Errorf("the target's rows: %v, want all %d of batch B", got, keys)
			}
			if point == "insert" {
				if n := e.query("SELECT count() FROM " + e.db + ".orders_cdc WHERE status = 'A'"); n[0] != "0" {
					t.Errorf("%s rows of the frozen holder's insert landed", n[0])
				}
			}
		})
	}
}

// TestLedgerWithOneBatchRecordedTwice: two rows of one seq recording one
// batch (a quorum insert that failed with UNKNOWN_STATUS_OF_INSERT and
// landed, and its re-run's through another replica) are one record: the
// replay of that batch is skipped and the next batch applies after it as
// seq 2.
func TestLedgerWithOneBatchRecordedTwice(t *testing.T) {
	e := newEnv(t, ordersMapping)
	e.setup()
	first := orderEvent(1, int64(1), int64(1), "a", int64(100), false)
	if _, _, err := e.apply(true, first); err != nil {
		t.Fatal(err)
	}
	ledger := mapping.Qualified(e.db, mapping.LedgerName(e.m))
	cols := strings.Join(e.columnsOf(mapping.LedgerName(e.m)), ", ")
	if err := e.conn.Exec(context.Background(), "INSERT INTO "+ledger+" ("+cols+") SELECT "+
		strings.Replace(cols, "holder", "'0123456789abcdef'", 1)+" FROM "+ledger); err != nil {
		t.Fatal(err)
	}
	res, _, err := e.apply(true, first)
	if err != nil {
		t.Fatalf("the replay over a batch recorded twice: %v", err)
	}
	if res.Skipped != 1 {
		t.Errorf("the replay skipped %d events, want 1", res.Skipped)
	}
	if _, _, err := e.apply(true, orderEvent(1, int64(1), int64(1), "b", int64(200), false)); err != nil {
		t.Fatalf("the next batch: %v", err)
	}
	if got := e.query("SELECT toString(seq) FROM " + ledger + " ORDER BY seq, holder"); strings.Join(got, ",") != "1,1,2" {
		t.Errorf("ledger seqs %v, want 1,1,2", got)
	}
	if live := e.liveJSON(); !strings.Contains(live, `"b"`) || strings.Count(live, "\n") != 1 {
		t.Errorf("live view %q, want the one row of the second batch", live)
	}
}

// TestLedgerWithTwoRowsOfASeq: a ledger holding two rows of one seq that
// record different batches (what a broken holder appended before writes
// were fenced) is refused, naming both holders, and nothing is written.
func TestLedgerWithTwoRowsOfASeq(t *testing.T) {
	e := newEnv(t, ordersMapping)
	e.setup()
	if _, _, err := e.apply(true, orderEvent(1, int64(1), int64(1), "a", int64(100), false)); err != nil {
		t.Fatal(err)
	}
	ledger := mapping.Qualified(e.db, mapping.LedgerName(e.m))
	cols := strings.Join(e.columnsOf(mapping.LedgerName(e.m)), ", ")
	if err := e.conn.Exec(context.Background(), "INSERT INTO "+ledger+" ("+cols+") SELECT "+
		strings.NewReplacer("holder", "'0123456789abcdef'", "digest", "concat(digest, 'x')").Replace(cols)+" FROM "+ledger); err != nil {
		t.Fatal(err)
	}
	before := e.physical()
	_, cfg, err := e.apply(true, orderEvent(1, int64(1), int64(1), "b", int64(200), false))
	wantError(t, err, outcome.Refused, target.ErrLedgerSeq, ledger+" has 2 rows of seq 1", "holder 0123456789abcdef at ")
	if h := Hint(err); !strings.Contains(h, "ALTER TABLE <db>.<table>_ledger DELETE WHERE seq = <seq>") {
		t.Errorf("hint %q", h)
	}
	noOutputs(t, cfg)
	if e.physical() != before {
		t.Error("the refused batch changed the target")
	}
}
