package cdc

import (
	"context"
	"time"
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
	r := &applyRun{cfg: cfg, env: env, start: time.Now(), stop: stopState{step: stepDecode}}
	defer func() { err = r.stop.wrap(ctx, err) }()
	b, conn, err := r.decode(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.server.Close()
	lk, err := r.lock(ctx, conn.table)
	if err != nil {
		return nil, err
	}
	defer r.giveUp(ctx, lk)
	rd, err := r.readTarget(ctx, conn.table, lk, b)
	if err != nil {
		return nil, err
	}
	defer rd.expected.abort()
	sel, err := r.selectPending(rd)
	if err != nil {
		return nil, err
	}
	out, err := r.writeOutputs(rd, sel)
	if err != nil {
		return nil, err
	}
	defer out.abort()
	if err := r.insert(ctx, conn.table, lk, sel.Pending); err != nil {
		return nil, err
	}
	if err := r.verify(ctx, conn.table, rd.rows); err != nil {
		return nil, err
	}
	if err := r.record(ctx, conn.table, lk, rd, sel); err != nil {
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
// the Result).
type applyRun struct {
	cfg   Config
	env   Env
	start time.Time
	stop  stopState
	res   Result
}

// result returns the run's Result, its total time taken now.
func (r *applyRun) result() *Result {
	r.res.View = r.cfg.Mapping.Target.Database + "." + r.cfg.Mapping.Target.LiveView
	r.res.Total = time.Since(r.start)
	return &r.res
}
