package cdc

import (
	"context"
	"time"

	"github.com/changesink/changesink/tasks/cdc/applier"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/target"
)

// Apply applies one batch: decode and check it all while connecting to the
// target (nothing is written when a record is refused), take the target's
// lock, read the ledger and the target's rows of the batch's keys, choose
// the pending rows, write the output files, insert the pending rows in one
// block, read every key back and verify it, record the batch in the ledger,
// give the lock back and publish the output files. Refusals are
// *RecordError or sentinels marked outcome.Refused; a lost or unreachable
// server and a lock held too long are marked outcome.Transient; in every
// failure no output file is left behind.
func Apply(ctx context.Context, cfg Config, env Env) (_ *Result, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.checkBatchFile(); err != nil {
		return nil, err
	}
	r := &applyRun{cfg: cfg, env: env, start: time.Now(), stop: applier.Stop{Step: applier.StepDecode}}
	defer func() { err = r.stop.Wrap(ctx, err) }()
	b, conn, err := r.decode(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.server.Close()
	lk, err := r.lock(ctx, conn.table)
	if err != nil {
		return nil, err
	}
	defer applier.GiveBack(ctx, lk)
	defer func() { err = applier.LockFirst(ctx, lk, err, r.env.log()) }()
	t := r.table(conn.table, lk)
	defer func() { r.expected.abort() }()
	rd, err := t.ReadTarget(ctx, b)
	if err != nil {
		return nil, err
	}
	sel, err := t.SelectPending(rd)
	if err != nil {
		return nil, err
	}
	out, err := r.writeOutputs(sel)
	if err != nil {
		return nil, err
	}
	defer out.abort()
	if err := t.Insert(ctx, sel.Pending); err != nil {
		return nil, err
	}
	if err := t.Verify(ctx, rd); err != nil {
		return nil, err
	}
	if err := t.Record(ctx, rd, sel); err != nil {
		return nil, err
	}
	if err := r.release(ctx, lk); err != nil {
		return nil, err
	}
	if err := r.publish(out); err != nil {
		return nil, err
	}
	return r.result(), nil
}

// applyRun is one Apply: its settings, and what the steps report (the
// step it is in, for a stopped run's message; the timings and counts of
// the Result); expected is expected.jsonl, written while the target is
// read.
type applyRun struct {
	cfg      Config
	env      Env
	start    time.Time
	stop     applier.Stop
	res      Result
	expected *backgroundFile
}

// table is the run's writer of the target tbl, held under lk.
func (r *applyRun) table(tbl *target.Table, lk *target.Lock) *applier.Table {
	return &applier.Table{M: r.cfg.Mapping, Tbl: tbl, Lock: lk, Hooks: r.env.hooks, Stop: &r.stop, Res: &r.res.Counts, Log: r.env.log(),
		Origin: fileOrigin{path: r.cfg.BatchFile, workers: r.cfg.Workers, m: r.cfg.Mapping},
		OnRows: func(rows []*change.Row) {
			r.expected.abort() // written before a TRUNCATE added its markers
			r.expected = writeInBackground(r.env.Dir, ExpectedFile, r.cfg.Mapping, rows)
		}}
}

// result returns the run's Result, its total time taken now.
func (r *applyRun) result() *Result {
	r.res.View = r.cfg.Mapping.Target.Database + "." + r.cfg.Mapping.Target.LiveView
	r.res.Total = time.Since(r.start)
	return &r.res
}
