package cdc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/changesink/changesink/internal/kestra"
	"github.com/changesink/changesink/internal/outcome"
)

// Output file names, as the seed's tasks name them.
const (
	ExpectedFile = "expected.jsonl"
	PendingFile  = "pending.jsonl"
)

// SetupResult reports what setup ensured.
type SetupResult struct {
	Table, View, ServerVersion string
	// Statements are the statements run, in order.
	Statements []string
}

// Outputs implements kestra.Result.
func (r *SetupResult) Outputs() map[string]any {
	return map[string]any{"table": r.Table, "view": r.View, "server_version": r.ServerVersion}
}

// Metrics implements kestra.Result.
func (r *SetupResult) Metrics() []kestra.Metric { return nil }

// Summary is the one-line log of the run.
func (r *SetupResult) Summary() string {
	return fmt.Sprintf("Target %s and view %s are in place on ClickHouse %s.", r.Table, r.View, r.ServerVersion)
}

// Setup creates (if absent) the target database when the mapping asks and
// the ReplacingMergeTree table, checks that an existing table matches the
// mapping (ErrTargetMismatch), then creates the live view and checks that
// it is a view of the mapped columns (ErrTargetMismatch), and creates the
// ledger (ledger.go). It is idempotent. A mapping the server cannot store
// is a configuration error (ErrUnsupportedServer, outcome.Config): a
// DateTime64 column on a server older than 20.1, a Decimal of more than 38
// digits (Decimal256) on one older than 21.6.
func Setup(ctx context.Context, cfg Config) (*SetupResult, error) {
	if err := cfg.Validate(false); err != nil {
		return nil, err
	}
	m := cfg.Mapping
	t, err := connect(ctx, cfg.ClickHouse, m)
	if err != nil {
		return nil, err
	}
	defer t.close()
	if err := t.checkSupported(); err != nil {
		return nil, err
	}
	res := &SetupResult{
		Table:         m.Target.Database + "." + m.Target.Table,
		View:          m.Target.Database + "." + m.Target.LiveView,
		ServerVersion: t.version,
	}
	if m.Target.CreateDatabase {
		res.Statements = append(res.Statements, createDatabaseSQL(m))
	}
	if err := t.checkOrphanLedger(ctx); err != nil {
		return nil, err
	}
	table := createTableSQL(m, t.caps)
	res.Statements = append(res.Statements, table, createViewSQL(m), createLedgerSQL(m))
	for _, s := range res.Statements {
		if err := t.exec(ctx, s); err != nil {
			if chCode(err) == chUnknownDatabase {
				// Not "run cdc setup first": this is setup.
				return nil, outcome.Config.Mark(fmt.Errorf("%w: %s: create it (CREATE DATABASE %s), or set "+
					"target.create_database: true in the mapping so that setup creates it", ErrNoDatabase,
					quoteIdent(m.Target.Database), quoteIdent(m.Target.Database)))
			}
			return nil, err
		}
		// An existing table is checked before the view is created over it:
		// a missing column would otherwise fail the view with ClickHouse's
		// "Unknown identifier" instead of ErrTargetMismatch naming it.
		if s == table {
			if _, err := t.checkSchema(ctx); err != nil {
				return nil, err
			}
		}
	}
	if err := t.checkView(ctx); err != nil {
		return nil, err
	}
	if err := t.checkLedger(ctx); err != nil {
		return nil, err
	}
	return res, nil
}

// Result is the outcome of one applied batch.
type Result struct {
	// Events is the number of change events in the batch; Keys the distinct keys.
	Events, Keys int64
	// Pending keys were written (absent from the target or older there);
	// Skipped keys were already there at this LSN or newer; Deletes counts
	// the delete markers among the pending rows; Verified the keys read back.
	Pending, Skipped, Deletes, Verified int64
	// View is the live view to query.
	View string
	// Durations of the steps.
	Decode, Read, Insert, Verify, Total time.Duration
}

// Outputs implements kestra.Result: the seed's outputs
// (prepare_batch.events/keys, select_changes.pending/skipped/deletes) and
// verified.
func (r *Result) Outputs() map[string]any {
	return map[string]any{
		"events": r.Events, "keys": r.Keys, "pending": r.Pending,
		"skipped": r.Skipped, "deletes": r.Deletes, "verified": r.Verified,
	}
}

// Metrics implements kestra.Result: counters and step timers (seconds).
func (r *Result) Metrics() []kestra.Metric {
	tags := map[string]string{"view": r.View}
	return []kestra.Metric{
		kestra.Counter("events", float64(r.Events), tags),
		kestra.Counter("keys", float64(r.Keys), tags),
		kestra.Counter("pending", float64(r.Pending), tags),
		kestra.Counter("skipped", float64(r.Skipped), tags),
		kestra.Counter("deletes", float64(r.Deletes), tags),
		kestra.Counter("verified", float64(r.Verified), tags),
		kestra.Timer("decode", r.Decode, tags),
		kestra.Timer("read_current", r.Read, tags),
		kestra.Timer("insert", r.Insert, tags),
		kestra.Timer("verify", r.Verify, tags),
		kestra.Timer("duration", r.Total, tags),
	}
}

// Summary is the seed's summary log line.
func (r *Result) Summary() string {
	return fmt.Sprintf("%d captured events, %d newer keys applied (%d deletes), %d replayed/older keys skipped. "+
		"Read-back verified; query %s for current rows.", r.Events, r.Pending, r.Deletes, r.Skipped, r.View)
}

// Apply applies one batch: decode and validate it all (nothing is written
// when a record is refused), merge it by version (order.go, batch.go), take
// the target's lock (lock.go), read the ledger (ledger.go) and the target's
// winning version of these keys (and the previous values of unchanged TOAST
// columns the batch lacks: toast.go), refuse a batch that went backwards, insert
// the newer rows in one block, read every key back and verify it, record
// the batch in the ledger, then commit expected.jsonl and pending.jsonl.
// Refusals are *RecordError or sentinels marked outcome.Refused; a lost or
// unreachable server and a lock held too long are marked
// outcome.Transient; in every failure no output file is left behind.
func Apply(ctx context.Context, cfg Config) (_ *Result, err error) {
	start := time.Now()
	if err := cfg.Validate(true); err != nil {
		return nil, err
	}
	st := stopState{step: "decoding the batch"}
	defer func() { err = st.wrap(ctx, err) }()
	m := cfg.Mapping
	res := &Result{View: m.Target.Database + "." + m.Target.LiveView}

	// The connection and the schema check run while the batch decodes (they
	// wait on the network, decoding on the CPUs); a refusal of the batch
	// still wins over a connection or schema error, as when they ran after.
	cctx, stopConnect := context.WithCancel(ctx)
	defer stopConnect()
	connected := make(chan connection, 1)
	go func() { connected <- open(cctx, cfg.ClickHouse, m) }()
	b, err := decodeFile(ctx, cfg.BatchFile, m, cfg.Workers)
	if err == nil && b.events == 0 {
		err = outcome.Refused.Mark(fmt.Errorf("%s: %w", cfg.BatchFile, ErrEmptyBatch))
	}
	if err != nil {
		stopConnect()
		if c := <-connected; c.target != nil {
			c.target.close()
		}
		return nil, markInput(err)
	}
	res.Decode = time.Since(start)

	st.step = "connecting to ClickHouse"
	c := <-connected
	if c.target != nil {
		defer c.target.close()
	}
	if c.err != nil {
		return nil, c.err
	}
	tbl := c.table
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if c.viewMade {
		log.Warn(fmt.Sprintf("cdc: the live view %s was missing (dropped by hand?); made it again, as cdc setup does",
			qualified(m.Target.Database, m.Target.LiveView)))
	}

	// One writer per target: everything from the reads to the ledger row
	// happens under the lock.
	step := time.Now()
	timing := cfg.lockTiming
	if timing == (lockTiming{}) {
		timing = defaultLockTiming
	}
	st.step = "waiting for the target's lock"
	lk, err := tbl.lock(ctx, timing, log)
	if err != nil {
		return nil, err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lk.releaseWithin())
		defer cancel()
		_ = lk.release(rctx)
	}()
	st.step = "reading the target"
	if cfg.hooks.locked != nil {
		if err := cfg.hooks.locked(ctx); err != nil {
			return nil, err
		}
	}
	if err := lk.sweepAsides(ctx, log); err != nil {
		return nil, err
	}
	led, err := tbl.ensureLedger(ctx, lk.id, b.digest())
	if err != nil {
		return nil, err
	}
	prev := led.last // the ledger row this batch follows
	if led.replay != nil {
		prev = led.beforeReplay
	}
	if prev != nil && len(prev.openKeys) > 0 {
		// The previous batch left keys with two live rows: decode again,
		// starting those keys from what it left.
		if b, err = tbl.redecodeWithSeeds(ctx, cfg.BatchFile, cfg.Workers, prev.openKeys, led.replay != nil); err != nil {
			return nil, err
		}
	}
	if prev != nil {
		b.floorAt(prev.snapshotLSN)
	}
	expected := b.sorted()
	if _, err := fillFromTarget(ctx, tbl, expected, b.trunc); err != nil {
		return nil, err
	}
	// expected.jsonl is written while the target is read, unless a TRUNCATE
	// adds markers to it (truncated, below: then once they are known); a
	// read error wins over a file error, as the file would not have been
	// needed.
	var expWrite *backgroundFile
	if b.trunc == nil {
		expWrite = writeInBackground(cfg.OutDir, ExpectedFile, m, expected)
		defer expWrite.abort()
	}
	current, err := tbl.current(ctx, expected)
	if err != nil {
		return nil, err
	}
	open, err := b.checkKeyChanges(ctx, tbl, current)
	if err != nil {
		return nil, err
	}
	if b.trunc != nil {
		markers, err := tbl.truncated(ctx, b)
		if err != nil {
			return nil, err
		}
		if len(markers) > 0 {
			expected = append(expected, markers...)
			slices.SortFunc(expected, func(x, y *row) int { return compareKeys(m, x, y) })
		}
		expWrite = writeInBackground(cfg.OutDir, ExpectedFile, m, expected)
		defer expWrite.abort()
	}
	res.Events, res.Keys = b.events, int64(len(expected))
	sel, err := selectPending(m, expected, current, prev)
	if err != nil {
		return nil, err
	}
	var src sourceID // the ledger's record of the source, for a batch not applied yet
	if led.replay == nil {
		src = sourceOf(cfg.BatchFile, m)
		if err := wentBackwards(tbl, b, src, sel, led); err != nil {
			return nil, err
		}
		if err := unplacedAfter(tbl, sel); err != nil {
			return nil, err
		}
	}
	pending := sel.pending
	if err := checkFilled(m, pending); err != nil {
		return nil, err
	}
	res.Pending, res.Skipped, res.Deletes = int64(len(pending)), res.Keys-int64(len(pending)), sel.deletes
	res.Read = time.Since(step)

	// The files are written before the insert and published after the verify.
	expFile, err := expWrite.wait()
	if err != nil {
		return nil, err
	}
	pendFile, err := writeRows(cfg.OutDir, PendingFile, m, pending)
	if err != nil {
		return nil, err
	}
	defer pendFile.Abort()

	step = time.Now()
	st.step = "inserting the batch"
	if cfg.hooks.beforeInsert != nil {
		if err := cfg.hooks.beforeInsert(ctx); err != nil {
			return nil, err
		}
	}
	if len(pending) > 0 {
		if err := lk.check(ctx); err != nil {
			return nil, err
		}
		st.sent = true
		if err := tbl.insert(ctx, pending); err != nil {
			return nil, err
		}
	}
	if cfg.hooks.afterInsert != nil {
		if err := cfg.hooks.afterInsert(ctx); err != nil {
			return nil, err
		}
	}
	res.Insert = time.Since(step)

	step = time.Now()
	st.step = "verifying the batch"
	if res.Verified, err = verify(ctx, tbl, expected); err != nil {
		return nil, err
	}
	res.Verify = time.Since(step)

	st.step = stepLedger
	if led.replay == nil {
		if err := lk.check(ctx); err != nil {
			return nil, err
		}
		if err := tbl.appendLedger(ctx, led.last, b.entry(lk.id, src, expected, len(pending), open, led.last)); err != nil {
			if chCode(err) == chUnknownTable {
				// Apply makes the ledger itself (ensureLedger): not a setup
				// to run, and the batch's rows are in (the exit-3 case).
				return nil, outcome.Transient.Mark(fmt.Errorf("the ledger %s was dropped during this run: the batch is in the target and verified, not recorded; "+
					"re-run the batch (the re-run makes the ledger again and records it): %w", qualified(m.Target.Database, ledgerName(m)), err))
			}
			return nil, err
		}
	}
	st.step = stepRecorded
	if cfg.hooks.recorded != nil {
		if err := cfg.hooks.recorded(ctx); err != nil {
			return nil, err
		}
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lk.releaseWithin())
	err = lk.release(rctx)
	cancel()
	if err != nil {
		// The target is right and recorded; only the lock may be left.
		stopped := ""
		if ctx.Err() != nil {
			stopped = fmt.Sprintf(" (the run was stopped meanwhile, %s, and gave the lock up to %s to be given back)", outcome.StopCause(ctx), lk.releaseWithin())
		}
		return nil, outcome.Transient.Mark(fmt.Errorf("the batch is applied, verified and recorded in the ledger, but giving back "+
			"the lock failed%s: %w; re-run the batch: a replay writes nothing twice and publishes the output files. A lock left as %s "+
			"is broken by the next run %[4]s after its last heartbeat; a table %[5]s left by this run holds no lock, and the first run "+
			"to take the lock %[4]s after this one drops it (or now: DROP TABLE IF EXISTS %[5]s)",
			stopped, err, lk.name, lk.timing.stale, lk.aside()))
	}

	for _, f := range []*kestra.File{expFile, pendFile} {
		if err := f.Commit(); err != nil {
			// The target is right; only the task's outputs are missing.
			return nil, outcome.Transient.Mark(fmt.Errorf("the batch is applied, verified and recorded in the ledger, but an output file "+
				"could not be published in %s: %w; re-run the batch: a replay writes nothing twice and writes expected.jsonl again, "+
				"with an empty pending.jsonl (this run applied those rows)", kestra.EnvWorkingDir, err))
		}
	}
	res.Total = time.Since(start)
	return res, nil
}

const (
	stepLedger   = "recording the batch in the ledger"
	stepRecorded = "giving back the target's lock"
)

// stopState is where a run is, for the message of a run stopped there.
type stopState struct {
	step string
	sent bool // the insert was sent: the batch's rows may be in the target
}

// wrap says what a stop (a signal or Kestra's timeout cancels ctx) left:
// the step, what the target holds, and that a re-run converges; the
// error's class (transient) is kept.
func (s stopState) wrap(ctx context.Context, err error) error {
	if !outcome.Stopped(ctx, err) {
		return err
	}
	held := "nothing was written"
	switch {
	case s.step == stepRecorded:
		return err // its message says what the run did, and the stop
	case s.step == stepLedger:
		held = "the target holds the batch, verified; its ledger row may be missing"
	case s.sent:
		held = "the target holds none or all of the batch's rows (not yet recorded in the ledger)"
	}
	return outcome.Transient.Mark(fmt.Errorf("cdc apply was stopped (%s) while %s; %s; re-run the batch (a re-run converges): %w", outcome.StopCause(ctx), s.step, held, err))
}

// backgroundFile is an output file written by its own goroutine.
type backgroundFile struct {
	done chan struct{} // closed when f and err are set
	f    *kestra.File
	err  error
}

// writeInBackground starts writing rows into the not-yet-published output
// file name (writeRows).
func writeInBackground(dir kestra.Dir, name string, m *Mapping, rows []*row) *backgroundFile {
	w := &backgroundFile{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		w.f, w.err = writeRows(dir, name, m, rows)
	}()
	return w
}

// wait returns the written file, or why it could not be written.
func (w *backgroundFile) wait() (*kestra.File, error) {
	<-w.done
	return w.f, w.err
}

// abort waits for the write and removes the file unless it was published.
func (w *backgroundFile) abort() {
	if f, _ := w.wait(); f != nil {
		f.Abort()
	}
}

// connection is the target as open found it, or why it could not.
type connection struct {
	target   *target // nil when the connection failed
	table    *table
	viewMade bool // the live view was missing: open made it again
	err      error
}

// open connects to the target and checks it: the server supports the
// mapping, the table matches it, and the live view is a view of the
// mapped columns. A missing live view (dropped by hand, or by the runbook's
// "drop the live view" step without the cdc setup after it) is made again,
// as setup makes it: the run's summary sends readers to it, and a batch
// applied without it would leave them failing on a missing view.
func open(ctx context.Context, cfg ClickHouse, m *Mapping) connection {
	t, err := connect(ctx, cfg, m)
	if err != nil {
		return connection{err: err}
	}
	if err := t.checkSupported(); err != nil {
		return connection{target: t, err: err}
	}
	tbl, err := t.checkSchema(ctx)
	if err != nil {
		return connection{target: t, err: err}
	}
	made, err := t.ensureView(ctx)
	return connection{target: t, table: tbl, viewMade: made, err: err}
}

// selection is what selectPending decided.
type selection struct {
	pending []*row
	deletes int64
	// newer counts keys the target holds at a lower version, older keys it
	// holds at a higher one, same exact replays; keys it lacks count in none.
	newer, older, same, absent int
	firstOlder                 *row
	firstOlderTarget           uint64
	// unplaced is the first older key whose version could not be placed
	// after its snapshot (unplacedAfter), and the target's version of it.
	unplaced       *row
	unplacedTarget uint64
}

// selectPending implements the seed's select_changes: a key is pending when
// the target lacks it or holds an older version; an equal version with a
// different payload is refused (ErrTargetConflict), except a later change
// of the transaction the previous batch ended in, at that transaction's
// floor (order.go: both share a version, the later insert wins); an equal
// one is a replay.
func selectPending(m *Mapping, expected []*row, current map[string]*row, prev *ledgerEntry) (selection, error) {
	var sel selection
	for _, r := range expected {
		cur := current[r.key]
		switch {
		case cur == nil:
			sel.absent++
		case cur.lsn < r.lsn:
			sel.newer++
		case cur.lsn == r.lsn && samePayload(cur, r):
			sel.same++
			continue
		case cur.lsn == r.lsn && continuesFloor(r, prev):
			sel.newer++
		case cur.lsn == r.lsn:
			return sel, outcome.Refused.Mark(rowError(m, r, ErrTargetConflict))
		default:
			sel.older++
			if sel.firstOlder == nil {
				sel.firstOlder, sel.firstOlderTarget = r, cur.lsn
			}
			// Only a change that carries a sequence without lsn_commit: a
			// batch without sequences (hand-made) is versioned by its
			// LSNs, and an older key is skipped, as the seed does.
			if sel.unplaced == nil && prev != nil && prev.kind == ledgerBaseline && r.change.unfloored() && r.change.sequenced {
				sel.unplaced, sel.unplacedTarget = r, cur.lsn
			}
			continue
		}
		sel.pending = append(sel.pending, r)
		if r.deleted {
			sel.deletes++
		}
	}
	return sel, nil
}

// continuesFloor reports a row at its transaction's floor in the
// transaction the previous batch ended in: the target's row at that
// version is an earlier change of the same transaction.
func continuesFloor(r *row, prev *ledgerEntry) bool {
	return prev != nil && prev.lastTxSet && r.change.txIDSet && r.change.txID == prev.lastTx &&
		isFloor(r) && r.change.floor == prev.lastFloor
}

// wentBackwards refuses a batch that was never applied when none of its
// keys is newer than the target, none is an exact replay of a row the
// target holds, and some are older: the versions of the source no longer
// follow the target's (a restore, a migration, a failover with other LSNs),
// or an old batch replayed after newer ones. Skipping such a batch as
// "older" would lose its changes silently. A key the target holds at the
// batch's very version and payload shows the batch belongs to the history
// the target has (part of an applied batch replayed): its older keys were
// superseded, and are skipped as before.
func wentBackwards(t *table, b *batch, src sourceID, sel selection, led ledgerState) error {
	if sel.newer > 0 || sel.same > 0 || sel.older == 0 {
		return nil
	}
	m := t.m
	r := sel.firstOlder
	ledger := qualified(m.Target.Database, ledgerName(m))
	last := "the ledger " + ledger + " is empty"
	if led.last != nil {
		last = "the ledger's last row is " + describeEntry(ledger, led.last)
	}
	e := rowError(m, r, fmt.Errorf("%w The target %s holds version %d for this key; none of this batch's %d keys is newer than the target or the same as a row it holds (%d older, %d new to it), "+
		"and this batch (digest %s, from %s) was never applied: %s. "+
		"If the source database was restored from a backup, migrated to another cluster or failed over, its LSNs no longer follow the target's: "+
		"rebuild the target (DROP TABLE %s, %s and the view %s, run changesink cdc setup) and have the trigger take a new snapshot "+
		"(a new slotName and stateName, or drop the replication slot and the trigger's state). "+
		"If this is an old batch replayed by mistake, do not apply it",
		ErrWentBackwards, qualified(m.Target.Database, m.Target.Table), sel.firstOlderTarget, sel.older+sel.absent, sel.older,
		sel.absent, b.digest()[:16], src.describe(), last,
		qualified(m.Target.Database, m.Target.Table), ledger, qualified(m.Target.Database, m.Target.LiveView)))
	return outcome.Refused.Mark(e)
}

// unplacedAfter refuses a batch that was never applied with a key older
// than the target whose change has no lsn_commit (the first transaction
// after a snapshot) when neither the batch nor the ledger knows that
// snapshot: the ledger's last row is a baseline (made over rows already in
// the target: a target the seed flow filled, or a ledger dropped by hand).
// Its version may belong after the snapshot's rows (docs/cdc.md, "Versions"),
// so skipping it as older could lose it.
func unplacedAfter(t *table, sel selection) error {
	if sel.unplaced == nil {
		return nil
	}
	m := t.m
	ledger := qualified(m.Target.Database, ledgerName(m))
	e := rowError(m, sel.unplaced, fmt.Errorf("%w The target %s holds version %d for this key, above this change's LSN, "+
		"but the change has no lsn_commit (metadata.source.sequence [null, …]: the first transaction after a snapshot) and neither this batch nor the ledger %s knows that snapshot's LSN "+
		"(its last row is a baseline: the ledger was made over rows already in the target, by a target the seed flow filled or after the ledger was dropped), "+
		"so whether the change follows the snapshot cannot be told, and skipping it as older could lose it. "+
		"Rebuild the target from a new snapshot (DROP TABLE %s, %s and the view %s, run changesink cdc setup, have the trigger take a new snapshot); "+
		"do not drop the ledger by hand. Nothing was written",
		ErrWentBackwards, qualified(m.Target.Database, m.Target.Table), sel.unplacedTarget, ledger,
		qualified(m.Target.Database, m.Target.Table), ledger, qualified(m.Target.Database, m.Target.LiveView)))
	return outcome.Refused.Mark(e)
}

// markInput marks decode errors: refusals of the input, or a file that
// cannot be read (configuration: the flow did not pass the batch).
func markInput(err error) error {
	var marked *outcome.Error
	if errors.As(err, &marked) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err // already marked, or a stopped run (transient)
	}
	// Not outcome.Classify: it calls both kinds left here internal, an
	// unmarked *RecordError and a file-system error (a directory given as
	// the batch fails its first read with EISDIR); here the first is a
	// refusal of the input and the second a batch the flow did not pass.
	var re *RecordError
	if errors.As(err, &re) {
		if errors.Is(err, ErrMalformed) {
			err = fmt.Errorf("%w; the batch file is cut short, corrupt or not Ion: replay an intact copy of the trigger's batch "+
				"(a hand-made file: fix it). Nothing was written", err)
		}
		return outcome.Refused.Mark(err)
	}
	return outcome.Config.Mark(fmt.Errorf("%w: %w", ErrConfig, err))
}

// verify reads every captured key back (seed task verify_batch): each must
// hold this exact version, or a newer one.
func verify(ctx context.Context, t *table, expected []*row) (int64, error) {
	actual, err := t.read(ctx, expected)
	if err != nil {
		return 0, err
	}
	var verified int64
	for _, want := range expected {
		got := actual[want.key]
		var why string
		switch {
		case got == nil:
			why = "the captured key is missing from ClickHouse"
		case got.lsn < want.lsn:
			why = fmt.Sprintf("ClickHouse holds the older version %d", got.lsn)
		case got.lsn == want.lsn && !samePayload(got, want):
			why = "ClickHouse holds a different payload at this version"
		}
		if why != "" {
			return verified, outcome.Refused.Mark(rowError(t.m, want, fmt.Errorf("%w: %s", ErrVerify, why)))
		}
		verified++
	}
	return verified, nil
}

// writeRows writes rows as JSON lines into a not-yet-published output file.
func writeRows(dir kestra.Dir, name string, m *Mapping, rows []*row) (*kestra.File, error) {
	f, err := dir.Create(name)
	if err != nil {
		return nil, outcome.Config.Mark(fmt.Errorf("%w: %w", ErrConfig, err))
	}
	w := bufio.NewWriterSize(f, 1<<20)
	var line []byte
	for _, r := range rows {
		line = appendJSONRow(line[:0], m, r)
		line = append(line, '\n')
		if _, err := w.Write(line); err != nil {
			f.Abort()
			return nil, outputFileErr(name, err)
		}
	}
	if err := w.Flush(); err != nil {
		f.Abort()
		return nil, outputFileErr(name, err)
	}
	return f, nil
}

// outputFileErr is a failed write of an output file, which happens before
// the insert: a full disk (or a file-size limit) in the working directory,
// not a bug.
func outputFileErr(name string, err error) error {
	return outcome.Transient.Mark(fmt.Errorf("write %s: %w: the working directory (%s) cannot take the output files (disk full?); "+
		"none of the batch was written to ClickHouse; free space there and re-run the batch", name, err, kestra.EnvWorkingDir))
}
