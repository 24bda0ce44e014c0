package target

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
)

// One writer per target across the replicas of a cluster. The single
// server's lock (lock.go) rests on CREATE and RENAME being atomic on one
// server; across replicas nothing is, but a quorum insert of every
// replica is linearizable: once an INSERT returns, every replica holds it,
// and a later read on any replica sees it (a plain read: plainRead says
// why not a sequentially consistent one). The lock
// is a Replicated table of rows (holder, host, pid, state, beat, nonce),
// <table>_lock, that setup creates ON CLUSTER; a run
//
//   - waits while another holder is live (its newest row is a claim or a
//     hold, its newest beat, by the server's clock, at most
//     LockTiming.Stale old), reading only;
//   - then claims: inserts a claim row, reads the live holders again, and
//     when it is alone inserts a hold row and holds the lock; when it is
//     not (another run claimed at the same moment), it withdraws (a gone
//     row), waits a random while and starts again under a new holder id.
//     Of two runs that both claim, the one whose read came later sees the
//     other's claim: both insert before they read, and the inserts are
//     linearizable; so two runs never both hold;
//   - holds: a hold row every LockTiming.Beat (the heartbeat); before the
//     insert and before the ledger row it checks (checkCluster) that its
//     newest heartbeat landed less than Stale/2 ago and that no other run
//     that held claimed after it (clusterHeldSQL: a run that found this
//     one stale and took the lock claimed later, so a holder whose
//     heartbeats come back after that stops, even once the other has
//     released);
//   - releases: a gone row.
//
// A holder killed stops heartbeating and its lock is broken by the next
// run Stale after its last beat. Rows older than two days are dropped by
// partition (sweep). Every write under the lock is fenced (fence.go) by
// clusterHeldSQL, the condition checkCluster checks: a holder frozen past
// Stale writes nothing once another run held the lock. Every insert waits
// for every replica, so with a replica down the lock cannot be taken
// (transient).

// The states of a holder's rows.
const (
	stateClaim = "claim"
	stateHeld  = "held"
	stateGone  = "gone"
)

// clusterLockColumns are the lock table's columns on a cluster.
var clusterLockColumns = [][2]string{
	{"holder", "String"}, {"host", "String"}, {"pid", "UInt32"}, {"state", "String"}, {"beat", "DateTime"}, {"nonce", "UInt64"},
}

// createClusterLockSQL is the lock table of a target on a cluster (which
// ddl makes a ReplicatedMergeTree ON CLUSTER), partitioned by day so that
// old rows go by partition.
func createClusterLockSQL(m *mapping.Mapping) string {
	cols := make([]string, len(clusterLockColumns))
	for i, c := range clusterLockColumns {
		cols[i] = c[0] + " " + c[1]
	}
	return "CREATE TABLE IF NOT EXISTS " + mapping.Qualified(m.Target.Database, mapping.LockName(m)) + " (" + strings.Join(cols, ", ") +
		") ENGINE = MergeTree PARTITION BY toDate(beat) ORDER BY (holder, beat)"
}

// clusterLockPutSQL inserts one row of holder id, stamped by the server's
// clock; every value is a quoted literal or a number.
func clusterLockPutSQL(name, id, host string, pid int, state string, nonce uint64) string {
	return "INSERT INTO " + name + " (holder, host, pid, state, beat, nonce) SELECT " + quoteString(id) + ", " + quoteString(host) + ", " +
		strconv.Itoa(pid) + ", " + quoteString(state) + ", now(), " + strconv.FormatUint(nonce, 10)
}

// clusterLockHoldersSQL reads each holder with a row in the last seconds
// (bound): its newest state, host and pid, its newest beat, its first
// claim, whether it held, and the server's now().
func clusterLockHoldersSQL(name string) string {
	return "SELECT holder, argMax(state, nonce), argMax(host, nonce), argMax(pid, nonce), max(beat), minIf(beat, state = 'claim'), " +
		"countIf(state = 'held'), now() FROM " + name + " WHERE beat >= now() - ? GROUP BY holder"
}

// clusterLock is the cluster part of a Lock.
type clusterLock struct {
	host string
	pid  int

	mu    sync.Mutex
	nonce uint64 // of the holder's last row
}

// clusterHolder is one holder as the lock's rows show it.
type clusterHolder struct {
	holderInfo
	state  string
	newest time.Time
	// claimed is its first claim in the window (zero: none there); held
	// says it held the lock then.
	claimed time.Time
	held    bool
}

func (h clusterHolder) live(stale time.Duration) bool {
	return (h.state == stateClaim || h.state == stateHeld) && h.age <= stale
}

// brokenBy lists the holders of all (the lock's rows, read after this
// run's claim, without it) whose lock this run broke: stale but not gone
// (a run killed, or cut off, while it claimed or held), and not broken
// before by another run, which would have claimed after the dead one's
// last beat and held. The run that takes the lock after a dead holder
// says so once; the runs after it, which still see the dead holder's rows
// for another Stale, do not.
func brokenBy(all []clusterHolder, stale time.Duration) []clusterHolder {
	var out []clusterHolder
	for _, d := range all {
		if d.state == stateGone || d.live(stale) {
			continue
		}
		taken := false
		for _, o := range all {
			taken = taken || (o.id != d.id && o.held && o.claimed.After(d.newest))
		}
		if !taken {
			out = append(out, d)
		}
	}
	return out
}

// lockCluster takes the target's lock on a cluster, as above.
func (t *Table) lockCluster(ctx context.Context, timing LockTiming, log *slog.Logger) (*Lock, error) {
	if err := t.checkActive(ctx); err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	name := mapping.Qualified(t.M.Target.Database, mapping.LockName(t.M))
	deadline := time.Now().Add(timing.Wait)
	wait := lockWait{log: log, what: "cluster lock", name: name, timing: timing, deadline: deadline}
	for {
		l := &Lock{Table: t, ID: newHolderID(), Timing: timing, Name: name, cl: &clusterLock{host: host, pid: os.Getpid()}}
		others, err := l.cl.others(ctx, l)
		if err != nil {
			return nil, err
		}
		var holder *clusterHolder
		for i := range others {
			if h := &others[i]; h.live(timing.Stale) {
				holder = h
			}
		}
		if holder == nil {
			held, seen, err := l.cl.claim(ctx, l)
			switch {
			case held:
				for _, h := range brokenBy(seen, timing.Stale) {
					log.Warn(fmt.Sprintf("cdc: broke the cluster lock %s: %s, over %s (a run killed, or cut off from ClickHouse, while it held the lock; "+
						"it writes nothing more)", name, h.holderInfo, timing.Stale))
				}
				return l, nil
			case err != nil && chCode(err) != chUnsatisfiedQuorum:
				return nil, err
			}
			// Not alone, or the other claims' inserts kept this one's out
			// (286): try again.
		} else {
			wait.taken(holder.holderInfo)
		}
		if time.Now().After(deadline) {
			who := "runs claiming it at the same moment"
			if holder != nil {
				who = holder.holderInfo.String()
			}
			return nil, outcome.Transient.Mark(fmt.Errorf("%w: %w %s: %s; waited %s (it is broken %s after its last heartbeat)",
				change.ErrTargetLocked, ErrClusterLocked, name, who, timing.Wait, timing.Stale))
		}
		// After a contended claim, a random while: two runs that claimed at
		// the same moment do not claim at the same moment again.
		pause := timing.Poll
		if holder == nil {
			pause += rand.N(4 * timing.Poll)
		}
		select {
		case <-ctx.Done():
			return nil, outcome.Transient.Mark(fmt.Errorf("waiting for the cluster lock %s: %w", name, ctx.Err()))
		case <-time.After(pause):
		}
	}
}

// claim inserts l's claim and reads the holders again: alone, it inserts
// its hold, starts the heartbeat and reports held, with the other holders
// it read (others); else it withdraws.
func (c *clusterLock) claim(ctx context.Context, l *Lock) (held bool, others []clusterHolder, _ error) {
	if err := c.put(ctx, l, stateClaim); err != nil {
		return false, nil, err
	}
	others, err := c.others(ctx, l)
	if err != nil {
		return false, nil, c.withdraw(ctx, l, err)
	}
	for _, h := range others {
		if h.live(l.Timing.Stale) {
			return false, nil, c.withdraw(ctx, l, nil)
		}
	}
	if err := c.put(ctx, l, stateHeld); err != nil {
		return false, nil, c.withdraw(ctx, l, err)
	}
	l.lastBeat = time.Now()
	l.Stop, l.Done = make(chan struct{}), make(chan struct{})
	go l.heartbeat(c.host)
	return true, others, nil
}

// withdraw gives up a claim (a gone row), returning cause, or the
// withdrawal's own error when there is no cause. A claim left behind is
// harmless: its run never holds, and it is stale after Stale.
func (c *clusterLock) withdraw(ctx context.Context, l *Lock, cause error) error {
	err := c.put(ctx, l, stateGone)
	if cause != nil {
		return cause
	}
	return err
}

// put inserts a row of l in state, with the next nonce. A quorum insert
// refused because another one into the table is not complete yet (another
// run's claim or heartbeat: 286, which writes nothing) is tried again for
// up to a heartbeat (the next one follows anyway), or Stale/2 for the
// other states.
func (c *clusterLock) put(ctx context.Context, l *Lock, state string) error {
	c.mu.Lock()
	c.nonce++
	nonce := c.nonce
	c.mu.Unlock()
	sql := clusterLockPutSQL(l.Name, l.ID, c.host, c.pid, state, nonce)
	within := l.Timing.Stale / 2
	if state == stateHeld && l.Done != nil {
		within = l.Timing.Beat
	}
	until := time.Now().Add(within)
	for {
		err := l.Table.exec(ctx, sql)
		if err == nil || chCode(err) != chUnsatisfiedQuorum || time.Now().After(until) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(20*time.Millisecond + rand.N(80*time.Millisecond)):
		}
	}
}

// others reads the holders other than l with a row in the last 2×Stale.
func (c *clusterLock) others(ctx context.Context, l *Lock) ([]clusterHolder, error) {
	all, err := c.holders(ctx, l)
	var out []clusterHolder
	for _, h := range all {
		if h.id != l.ID {
			out = append(out, h)
		}
	}
	return out, err
}

func (c *clusterLock) holders(ctx context.Context, l *Lock) ([]clusterHolder, error) {
	cctx, cancel := context.WithTimeout(ctx, l.Table.timeout)
	defer cancel()
	window := int(2 * l.Timing.Stale / time.Second)
	rows, err := l.Table.conn.Query(plainRead(cctx), clusterLockHoldersSQL(l.Name), max(window, 2))
	if err != nil {
		return nil, classify(fmt.Errorf("read the cluster lock %s: %w", l.Name, err))
	}
	defer rows.Close()
	var out []clusterHolder
	for rows.Next() {
		var h clusterHolder
		var now time.Time
		var helds uint64
		if err := rows.Scan(&h.id, &h.state, &h.host, &h.pid, &h.newest, &h.claimed, &helds, &now); err != nil {
			return nil, classify(fmt.Errorf("read the cluster lock %s: %w", l.Name, err))
		}
		h.age, h.held = now.Sub(h.newest), helds > 0
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, classify(fmt.Errorf("read the cluster lock %s: %w", l.Name, err))
	}
	return out, nil
}

// clusterHeldSQL is true while holder holds the cluster lock name: its
// newest row is a hold, and no other holder that ever held claimed after
// it. A run that broke this one's lock and released it since still
// counts, and a claim withdrawn does not: writes fenced by it (Fence) and
// checkCluster agree, so a check that passes after a fenced write proves
// the write was made. Claims of one second are not told apart: a run
// breaks a lock only once its newest beat is Stale (seconds) old, so its
// claim is seconds after the broken holder's; two of one second are runs
// one after the other.
func clusterHeldSQL(name, holder string) string {
	h := quoteString(holder)
	mine := "(SELECT minIf(beat, state = 'claim') FROM " + name + " WHERE holder = " + h + ")"
	return "(SELECT argMax(state, nonce) FROM " + name + " WHERE holder = " + h + ") = 'held' AND " +
		"(SELECT count() FROM (SELECT holder, minIf(beat, state = 'claim') AS claim FROM " + name + " WHERE holder != " + h +
		" GROUP BY holder HAVING countIf(state = 'held') > 0) WHERE claim > " + mine + ") = 0"
}

// checkCluster confirms the lock is still l's: its heartbeats land, its
// newest row is a hold, and no other holder claimed after it and held
// (clusterHeldSQL, the fence's condition).
func (l *Lock) checkCluster(ctx context.Context) error {
	l.mu.Lock()
	last, beatErr := l.lastBeat, l.beatErr
	l.mu.Unlock()
	lost := func(why error) error {
		return outcome.Transient.Mark(fmt.Errorf("%w: %w: %w; nothing more is written by this run", change.ErrTargetLocked, ErrClusterLocked, why))
	}
	if since := time.Since(last); since > l.Timing.Stale/2 {
		if beatErr != nil {
			// Why they stopped landing (a replica or ZooKeeper away) says
			// more than that they did.
			return classify(fmt.Errorf("the heartbeats of this run's cluster lock %s stopped landing %s ago; nothing more is written by this run: %w",
				l.Name, since.Round(time.Second), beatErr))
		}
		return lost(fmt.Errorf("the last heartbeat of this run's cluster lock %s landed %s ago; another run may break it", l.Name, since.Round(time.Second)))
	}
	cctx, cancel := context.WithTimeout(plainRead(ctx), l.Table.timeout)
	defer cancel()
	var held uint8
	if err := l.Table.conn.QueryRow(cctx, "SELECT "+clusterHeldSQL(l.Name, l.ID)).Scan(&held); err != nil {
		return classify(fmt.Errorf("read the cluster lock %s: %w", l.Name, err))
	}
	if held != 0 {
		return nil
	}
	// Lost: the lock's rows say who holds it now, for the message.
	who := "another run held it since"
	if all, err := l.cl.holders(ctx, l); err == nil {
		for _, h := range all {
			if h.id != l.ID && h.state == stateHeld && h.live(l.Timing.Stale) {
				who = h.holderInfo.String() + " took it"
			}
		}
	}
	return lost(fmt.Errorf("the cluster lock %s is no longer this run's (holder %s): %s", l.Name, l.ID, who))
}

// sweep drops the lock's partitions (days) older than yesterday: their
// rows are older than any window a run reads. A failure is logged (the
// next holder tries again), unless the server stopped answering.
func (c *clusterLock) sweep(ctx context.Context, l *Lock, log *slog.Logger) error {
	m := l.Table.M
	cctx, cancel := context.WithTimeout(ctx, l.Table.timeout)
	defer cancel()
	var parts []string
	err := l.Table.systemTables(cctx, "list the partitions of "+l.Name, func() error {
		parts = parts[:0]
		rows, err := l.Table.conn.Query(cctx, "SELECT DISTINCT partition FROM system.parts WHERE database = ? AND table = ? AND active AND "+
			"partition < toString(yesterday())", m.Target.Database, mapping.LockName(m))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var p string
			if err := rows.Scan(&p); err != nil {
				return err
			}
			parts = append(parts, p)
		}
		return rows.Err()
	})
	for _, p := range parts {
		if err == nil {
			err = l.Table.exec(cctx, "ALTER TABLE "+l.Name+" DROP PARTITION "+quoteString(p))
		}
	}
	if err != nil {
		if ctx.Err() != nil || outcome.Classify(err) == outcome.Transient {
			return err
		}
		log.Warn(fmt.Sprintf("cdc: could not drop the old rows of the cluster lock %s: %v; the next run tries again", l.Name, err))
	}
	return nil
}

// checkClusterLock refuses a lock table whose columns are not the cluster
// lock's (setup, on every replica).
func (t *Server) checkClusterLock(ctx context.Context) error {
	m := t.M
	name := mapping.Qualified(m.Target.Database, mapping.LockName(m))
	cols, err := t.columns(ctx, m.Target.Database, mapping.LockName(m))
	if err != nil {
		return err
	}
	got := map[string]string{}
	for _, c := range cols {
		got[c.name] = c.typ
	}
	for _, c := range clusterLockColumns {
		if got[c[0]] != c[1] {
			return outcome.Config.Mark(fmt.Errorf("%w: the cluster lock %s has no column %s %s (it has %q): drop it on every replica "+
				"and re-run changesink cdc setup", change.ErrTargetMismatch, name, c[0], c[1], got[c[0]]))
		}
	}
	return nil
}
