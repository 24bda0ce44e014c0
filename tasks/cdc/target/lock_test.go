package target

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/changesink/changesink/internal/testenv"
)

// TestLockBreaksStale: a holder that stopped heartbeating (killed) is
// broken once its newest heartbeat is older than stale, by the server's
// clock; the zombie finds out at its next check and writes nothing more.
//
//changesink:per-server
func TestLockBreaksStale(t *testing.T) {
	tbl := lockTarget(t)
	timing := testLockTiming
	timing.Stale = 2 * time.Second
	a := mustLock(t, tbl, timing)
	abandon(a)
	start := time.Now()
	var logs bytes.Buffer
	b, err := tbl.Lock(context.Background(), timing, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(context.Background())
	waited := time.Since(start)
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "cdc: broke the lock "+a.Name+": holder "+a.ID) ||
		!strings.Contains(logs.String(), fmt.Sprintf("over %s (a run killed, or cut off from ClickHouse, while it held the lock", timing.Stale)) {
		t.Errorf("log, want a WARN line saying the run broke %s's lock:\n%s", a.ID, logs.String())
	}
	if waited < time.Second {
		t.Errorf("broke a lock whose heartbeat was %s old (stale: %s)", waited, timing.Stale)
	}
	if err := a.Check(context.Background()); !errors.Is(err, change.ErrTargetLocked) {
		t.Errorf("the zombie's check: %v, want ErrTargetLocked", err)
	}
	if err := b.Check(context.Background()); err != nil {
		t.Errorf("the new holder: %v", err)
	}
	// The zombie's release leaves the new holder's lock alone.
	if err := a.dropOwn(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := b.Check(context.Background()); err != nil {
		t.Errorf("the new holder after the zombie's release: %v", err)
	}
}

// TestLockBreakIsABASafe: a waiter that judged holder A stale, when the
// lock it renames aside turns out to be a fresh one (A's was broken and
// taken again meanwhile), gives it back: the fresh holder keeps it.
//
//changesink:per-server
func TestLockBreakIsABASafe(t *testing.T) {
	tbl := lockTarget(t)
	timing := testLockTiming
	c := mustLock(t, tbl, timing)
	defer c.Release(context.Background())
	w := &Lock{Table: tbl, ID: newHolderID(), Timing: timing, Name: c.Name}
	stale := holderInfo{id: "a-holder-long-gone", age: time.Hour}
	if broken, err := w.breakStale(context.Background(), stale); err != nil || broken {
		t.Fatalf("breakStale: broken %v, %v; want the lock given back", broken, err)
	}
	if err := c.Check(context.Background()); err != nil {
		t.Errorf("the fresh holder lost its lock to a break meant for another: %v", err)
	}
}

// TestLockDropsLocksLeftAside: a run cut between renaming its lock aside
// and dropping it (its release, or a break of a stale lock) leaves
// <table>_lock_x<id>, which holds no lock. The next holder drops those
// whose newest heartbeat (or, empty, whose renaming) is older than the
// stale bound, and leaves a fresh one (a release in flight) and tables
// that only look alike.
//
//changesink:per-server
func TestLockDropsLocksLeftAside(t *testing.T) {
	e := newEnv(t, ordersMappingFile)
	e.setup()
	timing := testLockTiming
	timing.Stale = 2 * time.Second
	exec := func(sql string) {
		t.Helper()
		if err := e.conn.Exec(context.Background(), sql); err != nil {
			t.Fatal(err)
		}
	}
	aside := func(id, beat string) string {
		name := e.db + "." + asideName(e.m, id)
		exec("CREATE TABLE " + name + " ENGINE = Memory AS SELECT 'holder-" + id[:4] + "' AS holder, 'host' AS host, toUInt32(7) AS pid, " + beat + " AS beat")
		return name
	}
	old := aside("00000000000000aa", "now() - 3600")
	empty := e.db + "." + asideName(e.m, "00000000000000bb")
	exec("CREATE TABLE " + empty + " (holder String, host String, pid UInt32, beat DateTime) ENGINE = Memory")
	exec("CREATE TABLE " + e.db + "." + mapping.LockName(e.m) + "_xnot_a_holder (x UInt8) ENGINE = Memory")
	exec("CREATE TABLE " + e.db + "." + mapping.LockName(e.m) + "_x00000000000000AA (x UInt8) ENGINE = Memory")
	time.Sleep(timing.Stale + 1500*time.Millisecond) // the server's clock counts whole seconds
	aside("00000000000000cc", "now()")

	var logs bytes.Buffer
	l := mustLock(t, e.lockedTable(), timing)
	defer l.Release(context.Background())
	if err := l.SweepAsides(context.Background(), slog.New(slog.NewTextHandler(&logs, nil))); err != nil {
		t.Fatal(err)
	}
	got := e.query("SELECT name FROM system.tables WHERE database = ? AND name LIKE 'orders_cdc_lock_x%' ORDER BY name", e.db)
	want := []string{"orders_cdc_lock_x00000000000000AA", "orders_cdc_lock_x00000000000000cc", "orders_cdc_lock_xnot_a_holder"}
	if !slices.Equal(got, want) {
		t.Errorf("tables left: %v, want %v", got, want)
	}
	for _, line := range []string{
		"cdc: dropped " + old + ", a lock a run cut while giving it back left renamed aside (holder holder-0000 on host host, pid 7, last heartbeat 1h0m",
		"cdc: dropped " + empty + ", a lock a run cut while giving it back left renamed aside (an unknown holder",
	} {
		if !strings.Contains(logs.String(), line) {
			t.Errorf("log, want %q:\n%s", line, logs.String())
		}
	}
	if err := l.Check(context.Background()); err != nil {
		t.Errorf("the sweeping holder: %v", err)
	}
}

// TestReleaseTwiceLeavesTheNextHolder: apply releases its lock on success
// and again in a deferred call. The second release renamed the lock of the
// run that had taken it meanwhile aside (and back): that run's heartbeat
// or check could find it gone, or a third run take it. A released lock's
// release sends nothing: the first holder talks through a proxy that cuts
// the connection at a RENAME.
func TestReleaseTwiceLeavesTheNextHolder(t *testing.T) {
	e := newEnv(t, ordersMappingFile)
	e.setup()
	p, viaProxy := e.proxiedTable(time.Minute)
	a := mustLock(t, viaProxy, testLockTiming)
	if err := a.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	b := mustLock(t, e.lockedTable(), testLockTiming)
	defer b.Release(context.Background())
	p.CutOn([]byte("RENAME"))
	if err := a.Release(context.Background()); err != nil {
		t.Fatalf("the second release sent a statement: %v", err)
	}
	h, found, err := b.holder(context.Background(), mapping.LockName(b.Table.M))
	if err != nil || !found || h.id != b.ID {
		t.Fatalf("after the first holder's second release the lock is %+v (found %v, %v), want b's %s", h, found, err, b.ID)
	}
	if err := b.Check(context.Background()); err != nil {
		t.Errorf("the next holder lost its lock: %v", err)
	}
}

// TestLockDDLIsAtomic checks on the server under test what the lock rests
// on (target/lock.go): of concurrent CREATE TABLEs of one name exactly one
// succeeds and the others fail with TABLE_ALREADY_EXISTS (57), of
// concurrent RENAMEs of one table exactly one succeeds and the others fail
// with UNKNOWN_TABLE (60), and the Memory lock table holds its holder row.
// 18.16's databases are Ordinary, a current server's Atomic (RENAME and
// DROP work on table UUIDs there; a dropped table's data goes later).
//
//changesink:per-server
func TestLockDDLIsAtomic(t *testing.T) {
	e := newEnv(t, ordersMappingFile)
	t.Logf("%s: database engine %s", testenv.ClickHouseServer(), e.query("SELECT engine FROM system.databases WHERE name = ?", e.db)[0])
	lock := mapping.Qualified(e.db, mapping.LockName(e.m))
	const n = 8
	race := func(stmt func(i int) string) (ok int, codes []int32) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := e.conn.Exec(context.Background(), stmt(i))
				mu.Lock()
				defer mu.Unlock()
				var ex *clickhouse.Exception
				switch {
				case err == nil:
					ok++
				case errors.As(err, &ex):
					codes = append(codes, ex.Code)
				default:
					t.Errorf("statement %d: %v", i, err)
				}
			}()
		}
		wg.Wait()
		return ok, codes
	}
	ok, codes := race(func(i int) string { return lockCreateSQL(lock, fmt.Sprintf("holder%d", i), "host", i) })
	if ok != 1 || slices.ContainsFunc(codes, func(c int32) bool { return c != 57 }) {
		t.Errorf("concurrent CREATEs of the lock: %d succeeded, the others failed with codes %v; want 1, and 57", ok, codes)
	}
	if got := e.query("SELECT count() FROM " + lock); got[0] != "1" {
		t.Errorf("the lock holds %s rows, want its holder row", got[0])
	}
	ok, codes = race(func(i int) string { return renameSQL(lock, lock+fmt.Sprintf("_x%d", i)) })
	if ok != 1 || slices.ContainsFunc(codes, func(c int32) bool { return c != 60 }) {
		t.Errorf("concurrent RENAMEs of the lock: %d succeeded, the others failed with codes %v; want 1, and 60", ok, codes)
	}
}

// mustLock takes tbl's lock or fails the test.
func mustLock(t *testing.T, tbl *Table, timing LockTiming) *Lock {
	t.Helper()
	l, err := tbl.Lock(context.Background(), timing, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// proxiedTable opens the env's target as apply does, through a proxy in
// front of its server, with the call timeout given.
func (e *env) proxiedTable(timeout time.Duration) (*testenv.Proxy, *Table) {
	e.t.Helper()
	p, via := e.proxied()
	return p, e.openTable(ClickHouse{URL: via, Timeout: timeout})
}

// lockTarget sets a target up and returns its table, for the lock's tests.
func lockTarget(t *testing.T) *Table {
	e := newEnv(t, ordersMappingFile)
	e.setup()
	return e.lockedTable()
}

// abandon stops a held lock's heartbeat without releasing it: what the
// server sees of a run killed while holding it.
func abandon(l *Lock) {
	close(l.Stop)
	<-l.Done
	l.Stop = nil
}
