package cdc

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/decode"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/merge"
	"github.com/changesink/changesink/tasks/cdc/target"

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
	t, err := target.Connect(ctx, cfg.ClickHouse, m)
	if err != nil {
		return nil, err
	}
	defer t.Close()
	if err := t.CheckSupported(); err != nil {
		return nil, err
	}
	stmts, err := t.Setup(ctx)
	if err != nil {
		return nil, err
	}
	return &SetupResult{
		Table:         m.Target.Database + "." + m.Target.Table,
		View:          m.Target.Database + "." + m.Target.LiveView,
		ServerVersion: t.Version,
		Statements:    stmts,
	}, nil
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
	if err == nil && b.Events == 0 {
		err = outcome.Refused.Mark(fmt.Errorf("%s: %w", cfg.BatchFile, change.ErrEmptyBatch))
	}
	if err != nil {
		stopConnect()
		if c := <-connected; c.target != nil {
			c.target.Close()
		}
		return nil, markInput(err)
	}
	res.Decode = time.Since(start)

	st.step = "connecting to ClickHouse"
	c := <-connected
	if c.target != nil {
		defer c.target.Close()
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
			mapping.Qualified(m.Target.Database, m.Target.LiveView)))
	}

	// One writer per target: everything from the reads to the ledger row
	// happens under the lock.
	step := time.Now()
	timing := cfg.lockTiming
	if timing == (target.LockTiming{}) {
		timing = target.DefaultLockTiming
	}
	st.step = "waiting for the target's lock"
	lk, err := tbl.Lock(ctx, timing, log)
	if err != nil {
		return nil, err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lk.ReleaseWithin())
		defer cancel()
		_ = lk.Release(rctx)
	}()
	st.step = "reading the target"
	if cfg.hooks.locked != nil {
		if err := cfg.hooks.locked(ctx); err != nil {
			return nil, err
		}
	}
	if err := lk.SweepAsides(ctx, log); err != nil {
		return nil, err
	}
	led, err := tbl.EnsureLedger(ctx, lk.ID, b.Digest())
	if err != nil {
		return nil, err
	}
	prev := led.Last // the ledger row this batch follows
	if led.Replay != nil {
		prev = led.BeforeReplay
	}
	if prev != nil && len(prev.OpenKeys) > 0 {
		// The previous batch left keys with two live rows: decode again,
		// starting those keys from what it left.
		if b, err = redecodeWithSeeds(ctx, tbl, cfg.BatchFile, cfg.Workers, prev.OpenKeys, led.Replay != nil); err != nil {
			return nil, err
		}
	}
	if prev != nil {
		b.FloorAt(prev.SnapshotLSN)
	}
	expected := b.Sorted()
	if need := merge.UnchangedRows(expected); len(need) > 0 {
		cur, err := tbl.Read(ctx, need)
		if err != nil {
			return nil, err
		}
		if _, err := merge.FillFromTarget(m, need, cur, b.Trunc); err != nil {
			return nil, err
		}
	}
	// expected.jsonl is written while the target is read, unless a TRUNCATE
	// adds markers to it (truncated, below: then once they are known); a
	// read error wins over a file error, as the file would not have been
	// needed.
	var expWrite *backgroundFile
	if b.Trunc == nil {
		expWrite = writeInBackground(cfg.OutDir, ExpectedFile, m, expected)
		defer expWrite.abort()
	}
	current, err := tbl.Current(ctx, expected)
	if err != nil {
		return nil, err
	}
	open, err := keyChangesOf(ctx, tbl, b, current)
	if err != nil {
		return nil, err
	}
	if b.Trunc != nil {
		markers, err := tbl.Truncated(ctx, b.Trunc, b.Has)
		if err != nil {
			return nil, err
		}
		if len(markers) > 0 {
			expected = append(expected, markers...)
			slices.SortFunc(expected, func(x, y *change.Row) int { return change.CompareKeys(m, x, y) })
		}
		expWrite = writeInBackground(cfg.OutDir, ExpectedFile, m, expected)
		defer expWrite.abort()
	}
	res.Events, res.Keys = b.Events, int64(len(expected))
	sel, err := merge.SelectPending(m, expected, current, prev)
	if err != nil {
		return nil, err
	}
	var src change.SourceID // the ledger's record of the source, for a batch not applied yet
	if led.Replay == nil {
		src = decode.SourceOf(cfg.BatchFile, m)
		if err := merge.WentBackwards(m, b, src, sel, led); err != nil {
			return nil, err
		}
		if err := merge.UnplacedAfter(m, sel); err != nil {
			return nil, err
		}
	}
	pending := sel.Pending
	if err := merge.CheckFilled(m, pending); err != nil {
		return nil, err
	}
	res.Pending, res.Skipped, res.Deletes = int64(len(pending)), res.Keys-int64(len(pending)), sel.Deletes
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
		if err := lk.Check(ctx); err != nil {
			return nil, err
		}
		st.sent = true
		if err := tbl.Insert(ctx, pending); err != nil {
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
	if led.Replay == nil {
		if err := lk.Check(ctx); err != nil {
			return nil, err
		}
		if err := tbl.RecordBatch(ctx, led.Last, b.Entry(lk.ID, src, expected, len(pending), open, led.Last)); err != nil {
			return nil, err
		}
	}
	st.step = stepRecorded
	if cfg.hooks.recorded != nil {
		if err := cfg.hooks.recorded(ctx); err != nil {
			return nil, err
		}
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lk.ReleaseWithin())
	err = lk.Release(rctx)
	cancel()
	if err != nil {
		// The target is right and recorded; only the lock may be left.
		stopped := ""
		if ctx.Err() != nil {
			stopped = fmt.Sprintf(" (the run was stopped meanwhile, %s, and gave the lock up to %s to be given back)", outcome.StopCause(ctx), lk.ReleaseWithin())
		}
		return nil, outcome.Transient.Mark(fmt.Errorf("the batch is applied, verified and recorded in the ledger, but giving back "+
			"the lock failed%s: %w; re-run the batch: a replay writes nothing twice and publishes the output files. A lock left as %s "+
			"is broken by the next run %[4]s after its last heartbeat; a table %[5]s left by this run holds no lock, and the first run "+
			"to take the lock %[4]s after this one drops it (or now: DROP TABLE IF EXISTS %[5]s)",
			stopped, err, lk.Name, lk.Timing.Stale, lk.Aside()))
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
func writeInBackground(dir kestra.Dir, name string, m *mapping.Mapping, rows []*change.Row) *backgroundFile {
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
	target   *target.Server // nil when the connection failed
	table    *target.Table
	viewMade bool // the live view was missing: open made it again
	err      error
}

// open connects to the target and checks it: the server supports the
// mapping, the table matches it, and the live view is a view of the
// mapped columns. A missing live view (dropped by hand, or by the runbook's
// "drop the live view" step without the cdc setup after it) is made again,
// as setup makes it: the run's summary sends readers to it, and a batch
// applied without it would leave them failing on a missing view.
func open(ctx context.Context, cfg target.ClickHouse, m *mapping.Mapping) connection {
	t, err := target.Connect(ctx, cfg, m)
	if err != nil {
		return connection{err: err}
	}
	if err := t.CheckSupported(); err != nil {
		return connection{target: t, err: err}
	}
	tbl, err := t.CheckSchema(ctx)
	if err != nil {
		return connection{target: t, err: err}
	}
	made, err := t.EnsureView(ctx)
	return connection{target: t, table: tbl, viewMade: made, err: err}
}

// keyChangesOf runs the batch's key-change checks against the target's
// current rows, reading the older rows of the keys it carries to the next
// batch, and returns the keys left open.
func keyChangesOf(ctx context.Context, tbl *target.Table, b *merge.Batch, current map[string]*change.Row) ([]change.OpenKey, error) {
	kc, err := b.CheckKeyChanges(current)
	if err != nil {
		return nil, err
	}
	var old map[string]*change.Row
	if len(kc.Carried) > 0 {
		if old, err = tbl.Read(ctx, kc.Carried); err != nil {
			return nil, err
		}
	}
	return b.OpenCarried(kc, old)
}

// redecodeWithSeeds decodes the batch again, starting the keys the
// previous batch left with two live rows from what it left (the target
// holds their newest row).
func redecodeWithSeeds(ctx context.Context, t *target.Table, path string, workers int, open []change.OpenKey, replay bool) (*merge.Batch, error) {
	keys := make([]*change.Row, 0, len(open))
	for _, o := range open {
		k, err := hex.DecodeString(o.Key)
		if err != nil {
			return nil, outcome.Refused.Mark(fmt.Errorf("%w: the ledger's open key %q is not hex", change.ErrTargetMismatch, o.Key))
		}
		keys = append(keys, &change.Row{Key: string(k), Vals: change.KeyValues(t.M, string(k))})
	}
	cur, err := t.Read(ctx, keys)
	if err != nil {
		return nil, err
	}
	seeds, err := merge.SeedsOf(t.M, open, cur, replay)
	if err != nil {
		return nil, err
	}
	b, err := decodeFileWith(ctx, path, t.M, decodeOptions{workers: workers, seeds: seeds})
	if err != nil {
		return nil, markInput(err)
	}
	return b, nil
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
	var re *change.RecordError
	if errors.As(err, &re) {
		if errors.Is(err, change.ErrMalformed) {
			err = fmt.Errorf("%w; the batch file is cut short, corrupt or not Ion: replay an intact copy of the trigger's batch "+
				"(a hand-made file: fix it). Nothing was written", err)
		}
		return outcome.Refused.Mark(err)
	}
	return outcome.Config.Mark(fmt.Errorf("%w: %w", change.ErrConfig, err))
}

// verify reads every captured key back (seed task verify_batch): each must
// hold this exact version, or a newer one.
func verify(ctx context.Context, t *target.Table, expected []*change.Row) (int64, error) {
	actual, err := t.Read(ctx, expected)
	if err != nil {
		return 0, err
	}
	return merge.CompareReadBack(t.M, expected, actual)
}

// writeRows writes rows as JSON lines into a not-yet-published output file.
func writeRows(dir kestra.Dir, name string, m *mapping.Mapping, rows []*change.Row) (*kestra.File, error) {
	f, err := dir.Create(name)
	if err != nil {
		return nil, outcome.Config.Mark(fmt.Errorf("%w: %w", change.ErrConfig, err))
	}
	w := bufio.NewWriterSize(f, 1<<20)
	var line []byte
	for _, r := range rows {
		line = change.AppendJSON(line[:0], m, r)
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
