package cdc

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/target"
)

// clusterTable opens the env's target through replica i as apply does.
func (c *clusterEnv) clusterTable(i int) *target.Table {
	c.t.Helper()
	return c.openTable(target.ClickHouse{URL: c.cl.Replicas[i], Timeout: 20 * time.Second})
}

// TestClusterOneWriter: two cdc apply runs through different replicas, at
// once, with the same key and LSN and different payloads: one applies,
// the other waits for the lock and then refuses (the target holds the
// other payload at that version); the times each held the lock do not
// overlap, and the target holds one physical row on each replica.
func TestClusterOneWriter(t *testing.T) {
	c := newClusterEnv(t)
	c.setup()
	batches := []string{
		writeFile(t, "a.ion", encode(t, false, orderEvent(1, int64(10), int64(500), "from r1", int64(100), false))),
		writeFile(t, "b.ion", encode(t, true, orderEvent(1, int64(10), int64(500), "from r2", int64(100), false))),
	}
	var mu sync.Mutex
	var spans [2][2]time.Time // when each run took and gave back the lock
	var wg sync.WaitGroup
	errs := make([]error, 2)
	results := make([]*Result, 2)
	for i := range 2 {
		cfg := c.via(i, batches[i])
		cfg.hooks.Locked = func(context.Context) error {
			mu.Lock()
			spans[i][0] = time.Now()
			mu.Unlock()
			time.Sleep(time.Second) // the other run is waiting meanwhile
			return nil
		}
		cfg.hooks.Recorded = func(context.Context) error {
			mu.Lock()
			spans[i][1] = time.Now()
			mu.Unlock()
			return nil
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = testApply(context.Background(), cfg)
		}()
	}
	wg.Wait()
	won := 0
	if errs[0] != nil {
		won = 1
	}
	lost := 1 - won
	if errs[won] != nil || results[won].Pending != 1 {
		t.Fatalf("neither run applied: %v; %v", errs[0], errs[1])
	}
	if !errors.Is(errs[lost], change.ErrTargetConflict) || outcome.Classify(errs[lost]) != outcome.Refused {
		t.Errorf("the other run: %v, want a refused ErrTargetConflict", errs[lost])
	}
	// The loser held the lock too (it read the target under it), after.
	if spans[lost][0].Before(spans[won][1]) {
		t.Errorf("both held the lock at once: r%d from %s to %s, r%d from %s", won+1, spans[won][0].Format(time.StampMicro),
			spans[won][1].Format(time.StampMicro), lost+1, spans[lost][0].Format(time.StampMicro))
	}
	status := map[int]string{0: "from r1", 1: "from r2"}[won]
	for i := range c.conns {
		if got := c.onReplica(i, "SELECT status FROM "+c.db+".orders_cdc FINAL"); len(got) != 1 || got[0] != status {
			t.Errorf("replica r%d: %v, want the winner's row only", i+1, got)
		}
		if n := c.onReplica(i, "SELECT count() FROM "+c.db+".orders_cdc"); n[0] != "1" {
			t.Errorf("replica r%d: %s physical rows, want 1 (one writer)", i+1, n[0])
		}
	}
}

// TestClusterLockContention: four runs, two through each replica, take
// and give back the lock five times each, at once: never two hold it
// together, and every one gets it.
func TestClusterLockContention(t *testing.T) {
	c := newClusterEnv(t)
	c.setup()
	timing := target.LockTiming{Beat: 200 * time.Millisecond, Stale: 4 * time.Second, Wait: time.Minute, Poll: 50 * time.Millisecond}
	var holding, most atomic.Int32
	var taken atomic.Int32
	var wg sync.WaitGroup
	for w := range 4 {
		tbl := c.clusterTable(w % 2)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				l, err := tbl.Lock(context.Background(), timing, slog.New(slog.DiscardHandler))
				if err != nil {
					t.Errorf("run %d: %v", w, err)
					return
				}
				n := holding.Add(1)
				if n > most.Load() {
					most.Store(n)
				}
				if err := l.Check(context.Background()); err != nil {
					t.Errorf("run %d: a held lock fails its check: %v", w, err)
				}
				time.Sleep(100 * time.Millisecond)
				holding.Add(-1)
				taken.Add(1)
				if err := l.Release(context.Background()); err != nil {
					t.Errorf("run %d: release: %v", w, err)
				}
			}
		}()
	}
	wg.Wait()
	if most.Load() != 1 || taken.Load() != 20 {
		t.Errorf("at most %d held the lock at once (want 1); it was taken %d times (want 20)", most.Load(), taken.Load())
	}
}

// TestClusterLockBreaksStale: a holder that stops heartbeating (a killed
// run, as the servers see it) keeps the lock until its last heartbeat is
// Stale old; then a run through the other replica takes it, and the old
// holder's check fails: it writes nothing more.
func TestClusterLockBreaksStale(t *testing.T) {
	c := newClusterEnv(t)
	c.setup()
	old := mustLock(t, c.clusterTable(0), testLockTiming)
	abandon(old)
	start := time.Now()
	next := mustLock(t, c.clusterTable(1), testLockTiming)
	defer next.Release(context.Background())
	if waited := time.Since(start); waited < testLockTiming.Stale/2 {
		t.Errorf("the stale lock was broken after %s, under half the stale bound %s", waited, testLockTiming.Stale)
	}
	err := old.Check(context.Background())
	if !errors.Is(err, change.ErrTargetLocked) || outcome.Classify(err) != outcome.Transient {
		t.Errorf("the old holder's check: %v, want a transient ErrTargetLocked", err)
	}
	if err := next.Check(context.Background()); err != nil {
		t.Errorf("the new holder's check: %v", err)
	}
}

// TestClusterFencedWrites: a holder whose lock another run broke, held
// and released writes nothing on a cluster: its insert and ledger row
// are fenced by the cluster lock's condition (target/fence.go), which its
// check reads too, so the check after the write fails as the write did.
func TestClusterFencedWrites(t *testing.T) {
	ctx := context.Background()
	c := newClusterEnv(t)
	c.setup()
	tbl := c.clusterTable(0)
	old := mustLock(t, tbl, testLockTiming)
	abandon(old)
	next := mustLock(t, c.clusterTable(1), testLockTiming)
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
	row := &change.Row{Vals: []change.Value{{N: 1}, {N: 2}, {N: 3}, {S: "fenced"}}, Version: 100}
	row.Key = string(change.EncodeKey(nil, c.m, row.Vals))
	if err := tbl.Insert(ctx, []*change.Row{row}, old.Fence()); err != nil && !errors.Is(err, change.ErrTargetLocked) {
		t.Fatalf("the fenced insert: %v", err)
	}
	if got := c.query("SELECT count() FROM " + c.db + ".orders_cdc"); got[0] != "0" {
		t.Errorf("the broken holder's insert wrote %s rows", got[0])
	}
	err := old.Check(ctx)
	if !errors.Is(err, change.ErrTargetLocked) || !errors.Is(err, target.ErrClusterLocked) || outcome.Classify(err) != outcome.Transient {
		t.Errorf("the broken holder's check after its write: %v, want a transient ErrTargetLocked and ErrClusterLocked", err)
	}
	if h := Hint(err); !strings.Contains(h, "never to be dropped by hand") {
		t.Errorf("the lost cluster lock's hint %q is not the cluster lock's", h)
	}
	// The run that holds the lock now writes.
	again := mustLock(t, tbl, testLockTiming)
	defer again.Release(ctx)
	if err := tbl.Insert(ctx, []*change.Row{row}, again.Fence()); err != nil {
		t.Fatal(err)
	}
	if got := c.query("SELECT count() FROM " + c.db + ".orders_cdc"); got[0] != "1" {
		t.Errorf("the holder's insert wrote %s rows, want 1", got[0])
	}
	if err := again.Check(ctx); err != nil {
		t.Error(err)
	}
}

// syncLog is a log writer several goroutines may write to at once.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// count is how many times s occurs in the log.
func (l *syncLog) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

// TestClusterLockBrokenOnce (finding 4): a holder killed while it held
// the cluster lock is broken by the next run, which says so (a WARN
// line); the runs after it, which find the dead holder's rows in the
// lock's window for another Stale, do not say it again: one line per
// dead holder, not one per run.
func TestClusterLockBrokenOnce(t *testing.T) {
	c := newClusterEnv(t)
	c.setup()
	dead := mustLock(t, c.clusterTable(0), testLockTiming)
	abandon(dead)
	var log syncLog
	logger := slog.New(slog.NewTextHandler(&log, nil))
	runs := 0
	for start := time.Now(); time.Since(start) < testLockTiming.Stale*3/2 || runs < 3; runs++ {
		l, err := c.clusterTable(runs%2).Lock(context.Background(), testLockTiming, logger)
		if err != nil {
			t.Fatalf("run %d: %v", runs+1, err)
		}
		if err := l.Release(context.Background()); err != nil {
			t.Fatalf("run %d: release: %v", runs+1, err)
		}
	}
	if n := log.count("broke the cluster lock"); n != 1 || log.count(": holder "+dead.ID+" on host") != 1 {
		t.Errorf("%d runs logged %d lines of a broken lock (want 1, naming holder %s):\n%s", runs, n, dead.ID, log.b.String())
	}
}
