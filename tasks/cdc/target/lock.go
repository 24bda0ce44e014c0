package target

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"

	"github.com/changesink/changesink/internal/outcome"
)

// One writer per target. ClickHouse 18.16 has no transactions and no locks,
// but CREATE TABLE and RENAME TABLE are atomic per name (a DDL guard per
// table name: of two concurrent CREATEs of one name, one fails with
// TABLE_ALREADY_EXISTS, 57; of two RENAMEs of one table, one fails with
// UNKNOWN_TABLE, 60). The lock is the table <table>_lock (engine Memory):
//
//   - acquire: CREATE TABLE <table>_lock AS SELECT its holder row (a random
//     id, host, pid, now() of the server), one statement: a lock without
//     rows is one a server restart emptied (engine Memory), broken as stale
//     by its creation time;
//   - hold: a heartbeat inserts another row every LockTiming.Beat, in the
//     server's clock, only into a lock that holds a row of this run (a run
//     cut off from ClickHouse past LockTiming.Stale, whose lock was broken
//     and taken again, must not add its rows to the new holder's lock and
//     pass its checks there; a holder whose lock a server restart emptied
//     stops at its next check too); before the insert and before the
//     ledger row the holder checks the lock is still its own and its last
//     heartbeat is recent (a holder that cannot heartbeat stops,
//     transient);
//   - release: when the lock holds this run's rows, RENAME it to
//     <table>_lock_x<id>, check the renamed table's holder is this run,
//     DROP it (a lock that is not its own is renamed back); a run cut
//     between the RENAME and the DROP leaves that table, which the next
//     holder drops once its newest heartbeat is older than
//     LockTiming.Stale (SweepAsides);
//   - a waiter retries every LockTiming.Poll up to LockTiming.Wait, then
//     fails transient naming the holder; it breaks a lock whose newest
//     heartbeat is older than LockTiming.Stale by the server's clock (a
//     killed run): RENAME it away, check that the renamed table is the lock
//     it judged stale (same holder, still stale), DROP it, and compete for
//     the lock again. A rename that caught a fresh lock instead (the stale
//     one was broken and re-taken in between) is renamed back; when that
//     fails, the victim finds its lock gone at its next check and stops
//     before writing. So two runs never both write, and the name of the
//     one holding the lock is in every message about it.
//
// A holder frozen (SIGSTOP, a paused VM) for longer than LockTiming.Stale
// between its last check and a write does not write beside the run that
// broke its lock: every write is fenced by the lock (fence.go).

// LockTiming is how the lock is held and waited for.
type LockTiming struct {
	Beat  time.Duration // heartbeat interval
	Stale time.Duration // a lock whose newest heartbeat is older is broken
	Wait  time.Duration // how long a run waits for a held lock
	Poll  time.Duration // how often a waiting run tries again
	Say   time.Duration // how often a waiting run says it still waits (0: defaultSay)
}

// defaultSay is how often a run waiting for a lock says so: no wait is
// silent for longer.
const defaultSay = 10 * time.Second

// lockWait says what a run waiting for a lock waits for: when it starts,
// then every Say, with the holder, the time until the lock is broken
// (unless the holder beats again) and until the run gives up.
type lockWait struct {
	log         *slog.Logger
	what, name  string // "lock" or "cluster lock"; the lock's table
	timing      LockTiming
	deadline    time.Time
	start, said time.Time
}

// taken records one try that found h holding the lock.
func (w *lockWait) taken(h holderInfo) {
	now := time.Now()
	every := w.timing.Say
	if every <= 0 {
		every = defaultSay
	}
	switch {
	case w.start.IsZero():
		w.start, w.said = now, now
		w.log.Info(fmt.Sprintf("cdc: the %s %s is taken (%s); waiting up to %s, and breaking it once its last heartbeat is over %s old",
			w.what, w.name, h, w.timing.Wait, w.timing.Stale))
	case now.Sub(w.said) >= every:
		w.said = now
		w.log.Info(fmt.Sprintf("cdc: still waiting for the %s %s after %s: %s; it is broken in %s unless it beats again, and this run gives up in %s",
			w.what, w.name, now.Sub(w.start).Round(time.Second), h, max(w.timing.Stale-h.age, 0).Round(time.Second),
			max(time.Until(w.deadline), 0).Round(time.Second)))
	}
}

// DefaultLockTiming is the lock's timing unless the run's config sets its
// own: a run killed moments ago is broken after 30 s, so a run started
// right after it waits at most that (and at most 60 s for a live holder,
// then fails transient: a Kestra retry fits).
var DefaultLockTiming = LockTiming{Beat: 2 * time.Second, Stale: 30 * time.Second, Wait: 60 * time.Second, Poll: 250 * time.Millisecond,
	Say: defaultSay}

// holderInfo is who holds (or held) the lock, as its rows say.
type holderInfo struct {
	id, host string
	pid      uint32
	age      time.Duration // now() - newest heartbeat, by the server's clock
	rows     uint64
}

func (h holderInfo) String() string {
	if h.id == "" {
		return "an unknown holder (the lock table has no rows: a ClickHouse restart emptied it)"
	}
	return fmt.Sprintf("holder %s on host %s, pid %d, last heartbeat %s ago", h.id, h.host, h.pid, h.age.Round(time.Second))
}

// Lock is a held lock.
type Lock struct {
	Table  *Table
	ID     string
	Timing LockTiming
	Name   string // db.<table>_lock, quoted

	mu       sync.Mutex
	lastBeat time.Time // local monotonic time of the last heartbeat that landed
	lost     error     // why the lock is no longer ours
	beatErr  error     // the last heartbeat's failure, nil once one lands
	Stop     chan struct{}
	Done     chan struct{}
	// cl is the lock of a target on a cluster (clusterlock.go), which the
	// methods below hand over to; nil on one server.
	cl *clusterLock
	// released is closed when the lock's release (giveBack) has ended,
	// with its error in releaseErr; nil until release is first called.
	released   chan struct{}
	releaseErr error
}

// newHolderID returns a new holder id: 16 random hex digits.
func newHolderID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Lock takes the target's lock, waiting for a holder (and breaking a
// stale one) as above. log gets a line when the run starts to wait and
// when it breaks a lock.
func (t *Table) Lock(ctx context.Context, timing LockTiming, log *slog.Logger) (*Lock, error) {
	if t.cl != nil {
		return t.lockCluster(ctx, timing, log)
	}
	m := t.M
	l := &Lock{Table: t, ID: newHolderID(), Timing: timing, Name: mapping.Qualified(m.Target.Database, mapping.LockName(m))}
	host, _ := os.Hostname()
	deadline := time.Now().Add(timing.Wait)
	create := lockCreateSQL(l.Name, l.ID, host, os.Getpid())
	wait := lockWait{log: log, what: "lock", name: l.Name, timing: timing, deadline: deadline}
	for {
		err := t.exec(ctx, create)
		if err == nil {
			l.lastBeat = time.Now()
			l.Stop, l.Done = make(chan struct{}), make(chan struct{})
			go l.heartbeat(host)
			return l, nil
		}
		if chCode(err) != chTableAlreadyExists {
			return nil, err
		}
		h, found, err := l.holder(ctx, mapping.LockName(m))
		if err != nil {
			return nil, err
		}
		if !found && time.Now().Before(deadline) {
			continue // released meanwhile: take it
		}
		if found && h.age > timing.Stale {
			broken, err := l.breakStale(ctx, h)
			if err != nil {
				return nil, err
			}
			if broken {
				log.Warn(fmt.Sprintf("cdc: broke the lock %s: %s, over %s (a run killed, or cut off from ClickHouse, while it held the lock; "+
					"it writes nothing more)", l.Name, h, timing.Stale))
			}
			continue
		}
		wait.taken(h)
		if time.Now().After(deadline) {
			return nil, outcome.Transient.Mark(fmt.Errorf("%w %s: %s; waited %s (it is broken %s after its last heartbeat)",
				change.ErrTargetLocked, l.Name, h, timing.Wait, timing.Stale))
		}
		select {
		case <-ctx.Done():
			return nil, outcome.Transient.Mark(fmt.Errorf("waiting for the lock %s (%s): %w", l.Name, h, ctx.Err()))
		case <-time.After(timing.Poll):
		}
	}
}

func (l *Lock) insertBeat(ctx context.Context, host string) error {
	if l.cl != nil {
		return l.cl.put(ctx, l, stateHeld)
	}
	return l.Table.exec(ctx, lockBeatSQL(l.Name, l.ID, host, os.Getpid()))
}

// holder reads who holds the lock table bare (a name in the target's
// database: the lock or a lock renamed aside); found is false when it does
// not exist.
func (l *Lock) holder(ctx context.Context, bare string) (holderInfo, bool, error) {
	name := mapping.Qualified(l.Table.M.Target.Database, bare)
	cctx, cancel := context.WithTimeout(ctx, l.Table.timeout)
	defer cancel()
	var h holderInfo
	var newest, now time.Time
	err := l.Table.conn.QueryRow(cctx, lockHolderSQL(name)).
		Scan(&h.id, &h.host, &h.pid, &newest, &now, &h.rows)
	if chCode(err) == chUnknownTable {
		return h, false, nil
	}
	if err != nil {
		return h, false, classify(fmt.Errorf("read the lock %s: %w", name, err))
	}
	if h.rows == 0 {
		// No row: measure from the table's creation (metadata_modification_time).
		var made time.Time
		gone := false
		err := l.Table.systemTables(cctx, "read the lock "+name, func() error {
			err := l.Table.conn.QueryRow(cctx, lockMadeSQL, l.Table.M.Target.Database, bare).Scan(&made, &now)
			gone = errors.Is(err, sql.ErrNoRows)
			if gone {
				return nil
			}
			return err
		})
		if err != nil || gone {
			return h, false, err
		}
		newest = made
		h.id = ""
	}
	h.age = now.Sub(newest)
	return h, true, nil
}

// breakStale breaks the lock judged stale (h): rename, check, drop.
// broken reports that it dropped that lock.
func (l *Lock) breakStale(ctx context.Context, h holderInfo) (broken bool, _ error) {
	aside := l.Aside()
	if err := l.Table.exec(ctx, renameSQL(l.Name, aside)); err != nil {
		if c := chCode(err); c == chUnknownTable || c == chTableAlreadyExists {
			return false, nil // gone or re-taken meanwhile: compete again
		}
		return false, err
	}
	got, found, err := l.holder(ctx, asideName(l.Table.M, l.ID))
	if err != nil {
		return false, err
	}
	// An empty lock (a server restart emptied it: the lock is created with
	// its holder row) is measured by its creation time, which the rename
	// reset: still empty, it is the one judged stale.
	if found && got.id == h.id && (got.age > l.Timing.Stale || (h.rows == 0 && got.rows == 0)) {
		return true, l.Table.exec(ctx, "DROP TABLE IF EXISTS "+aside)
	}
	// Not the lock judged stale: give it back.
	if err := l.Table.exec(ctx, renameSQL(aside, l.Name)); err != nil {
		// The lock was taken again meanwhile: the run it belonged to finds
		// its lock gone at its next check and stops before writing.
		return false, l.Table.exec(ctx, "DROP TABLE IF EXISTS "+aside)
	}
	return false, nil
}

func (l *Lock) heartbeat(host string) {
	defer close(l.Done)
	tick := time.NewTicker(l.Timing.Beat)
	defer tick.Stop()
	for {
		select {
		case <-l.Stop:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), min(l.Table.timeout, l.Timing.Stale/2))
		err := l.insertBeat(ctx, host)
		cancel()
		l.mu.Lock()
		l.beatErr = err
		switch {
		case err == nil:
			l.lastBeat = time.Now()
		case chCode(err) == chUnknownTable:
			l.lost = fmt.Errorf("the lock %s was broken by another run (this run's heartbeats stopped landing for over %s)", l.Name, l.Timing.Stale)
		}
		l.mu.Unlock()
	}
}

// Check confirms the lock is still this run's: its heartbeats land, and
// the lock table's holder is this run.
func (l *Lock) Check(ctx context.Context) error {
	if l.cl != nil {
		return l.checkCluster(ctx)
	}
	l.mu.Lock()
	lost, last := l.lost, l.lastBeat
	l.mu.Unlock()
	if lost == nil && time.Since(last) > l.Timing.Stale/2 {
		lost = fmt.Errorf("the last heartbeat of this run's lock %s landed %s ago; another run may break it", l.Name, time.Since(last).Round(time.Second))
	}
	if lost == nil {
		mine, err := l.mine(ctx, l.Name)
		if err != nil {
			return err
		}
		if !mine {
			lost = fmt.Errorf("the lock %s is no longer this run's (holder %s): another run broke it", l.Name, l.ID)
		}
	}
	if lost != nil {
		return outcome.Transient.Mark(fmt.Errorf("%w: %w; nothing more is written by this run", change.ErrTargetLocked, lost))
	}
	return nil
}

// Release gives the lock up: stop the heartbeat, then rename the lock
// aside, check it is this run's, drop it. A lock that is not this run's is
// left (renamed back). It returns when that has ended or ctx is done,
// whichever comes first: clickhouse-go dials and reads a new connection's
// hello under its own dial timeout, not ctx, so on a frozen server the
// run would otherwise wait out one more timeout per call. A release cut
// short that way goes on in the background until its calls fail (a lock
// left is broken by the next run after LockTiming.Stale, a lock renamed
// aside swept by the next holder). Release is given up once: a later
// call sends nothing and does not wait again; it returns the first one's
// result, or errReleasing while that goes on. A second rename would move
// the lock of the run that took it next aside, and that run could find it
// gone (or lose it to a third).
func (l *Lock) Release(ctx context.Context) error {
	if l.released != nil {
		select {
		case <-l.released:
			return l.releaseErr
		default:
			return errReleasing
		}
	}
	done := make(chan struct{})
	l.released = done
	go func() {
		defer close(done)
		l.releaseErr = l.giveBack(ctx)
	}()
	select {
	case <-l.released:
		return l.releaseErr
	case <-ctx.Done():
		return classify(fmt.Errorf("give back the lock %s: ClickHouse did not answer in time: %w", l.Name, context.Cause(ctx)))
	}
}

// errReleasing: an earlier release of the lock was cut short by its
// context and goes on in the background.
var errReleasing = errors.New("giving the lock back is still under way")

// ReleaseWithin bounds a release: the call timeout, at most 10 s. Giving
// a lock back takes milliseconds on a server that answers; on one that
// does not, a run that already waited out a timeout need not wait out a
// second one in full (the next run breaks the lock left after
// LockTiming.Stale).
func (l *Lock) ReleaseWithin() time.Duration { return min(l.Table.timeout, 10*time.Second) }

// giveBack stops the heartbeat and drops the lock if it is this run's.
func (l *Lock) giveBack(ctx context.Context) error {
	if l.Stop != nil {
		close(l.Stop)
		<-l.Done
	}
	return l.dropOwn(ctx)
}

// Aside is the name this run renames a lock to before dropping it.
func (l *Lock) Aside() string {
	return mapping.Qualified(l.Table.M.Target.Database, asideName(l.Table.M, l.ID))
}

// asideName is the bare name holder id renames the lock to.
func asideName(m *mapping.Mapping, id string) string { return mapping.LockName(m) + "_x" + id }

// SweepAsides drops the locks renamed aside (asideName) that runs cut
// between their RENAME and their DROP left behind, once their newest
// heartbeat (or, without rows, their renaming) is older than
// LockTiming.Stale by the server's clock. Apply runs it once it holds the
// lock. Such a table holds no lock: no run heartbeats into it (a
// heartbeat lands only in a lock with its holder's rows, and a run renames
// its lock aside only after its heartbeat stopped, or to drop or give back
// at once a lock it judged stale), so one renamed aside that long ago is
// one nobody will touch again (dropping it early would at worst end a
// lock a waiter was breaking anyway). The tables are litter, not state: a
// failure to drop one is logged, and the next holder tries again; only a
// transient failure (a server that stopped answering) is returned, since
// the run's next call would wait for it again.
func (l *Lock) SweepAsides(ctx context.Context, log *slog.Logger) error {
	if l.cl != nil {
		return l.cl.sweep(ctx, l, log)
	}
	m := l.Table.M
	prefix := mapping.LockName(m) + "_x"
	transient := func(err error) bool { return ctx.Err() != nil || outcome.Classify(err) == outcome.Transient }
	names, err := l.asides(ctx, prefix)
	if err != nil {
		if transient(err) {
			return err
		}
		log.Warn(fmt.Sprintf("cdc: could not list the locks left renamed aside: %v; the next run tries again", err))
		return nil
	}
	for _, bare := range names {
		h, found, err := l.holder(ctx, bare)
		if err == nil && (!found || h.id == l.ID || h.age <= l.Timing.Stale) {
			continue
		}
		name := mapping.Qualified(m.Target.Database, bare)
		if err == nil {
			err = l.Table.exec(ctx, "DROP TABLE IF EXISTS "+name)
		}
		if err != nil {
			if transient(err) {
				return err
			}
			log.Warn(fmt.Sprintf("cdc: could not drop %s, a lock a cut run left renamed aside: %v; it holds no lock, and the next run tries again", name, err))
			continue
		}
		log.Info(fmt.Sprintf("cdc: dropped %s, a lock a run cut while giving it back left renamed aside (%s); it held no lock", name, h))
	}
	return nil
}

// asides lists the tables of the target's database named prefix followed
// by a holder id (newHolderID: 16 lowercase hex digits).
func (l *Lock) asides(ctx context.Context, prefix string) ([]string, error) {
	cctx, cancel := context.WithTimeout(ctx, l.Table.timeout)
	defer cancel()
	var names []string
	err := l.Table.systemTables(cctx, "list "+mapping.Qualified(l.Table.M.Target.Database, prefix)+"…", func() error {
		names = names[:0]
		rows, err := l.Table.conn.Query(cctx, lockAsidesSQL, l.Table.M.Target.Database, len(prefix), prefix)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				return err
			}
			if id := strings.TrimPrefix(n, prefix); len(id) == 16 && strings.Trim(id, "0123456789abcdef") == "" {
				names = append(names, n)
			}
		}
		return rows.Err()
	})
	return names, err
}

// dropOwn gives back the lock if it is still this run's: on one server
// its table renamed aside and dropped (put back when another run took the
// lock meanwhile), on a cluster the holder's row marked gone.
func (l *Lock) dropOwn(ctx context.Context) error {
	if l.cl != nil {
		return l.cl.put(ctx, l, stateGone)
	}
	// A lock broken meanwhile (and maybe taken again) is not this run's to
	// give back: renaming another run's lock aside, even for a moment,
	// makes that run's heartbeat or check find it gone.
	if mine, err := l.mine(ctx, l.Name); err != nil || !mine {
		return err
	}
	aside := l.Aside()
	if err := l.Table.exec(ctx, renameSQL(l.Name, aside)); err != nil {
		if chCode(err) == chUnknownTable {
			return nil
		}
		return err
	}
	mine, err := l.mine(ctx, aside)
	if err != nil {
		return err
	}
	if !mine {
		// Broken and taken again between the check and the rename.
		if err := l.Table.exec(ctx, renameSQL(aside, l.Name)); err == nil {
			return nil
		}
	}
	return l.Table.exec(ctx, "DROP TABLE IF EXISTS "+aside)
}

// mine reports whether the lock table name (qualified) holds this run's
// rows; a table that does not exist holds none.
func (l *Lock) mine(ctx context.Context, name string) (bool, error) {
	var n uint64
	cctx, cancel := context.WithTimeout(ctx, l.Table.timeout)
	defer cancel()
	err := l.Table.conn.QueryRow(cctx, lockMineSQL(name), l.ID).Scan(&n)
	switch {
	case chCode(err) == chUnknownTable:
		return false, nil
	case err != nil:
		return false, classify(fmt.Errorf("check the lock %s: %w", name, err))
	}
	return n > 0, nil
}
