package cdc

import (
	"context"
	"fmt"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/target"
)

// lock takes the target's lock: one writer per target, everything from
// the reads to the ledger row happens under it. Locks other runs left
// aside are swept once it is held.
func (r *applyRun) lock(ctx context.Context, tbl *target.Table) (*target.Lock, error) {
	timing := r.env.hooks.lockTiming
	if timing == (target.LockTiming{}) {
		timing = target.DefaultLockTiming
	}
	r.stop.step = stepLock
	lk, err := tbl.Lock(ctx, timing, r.env.log())
	if err != nil {
		return nil, err
	}
	r.stop.step = stepRead
	if err := r.env.hooks.run(ctx, r.env.hooks.locked); err != nil {
		r.giveUp(ctx, lk)
		return nil, err
	}
	if err := lk.SweepAsides(ctx, r.env.log()); err != nil {
		r.giveUp(ctx, lk)
		return nil, err
	}
	return lk, nil
}

// giveUp gives the lock back after a failure (or after release, which it
// then leaves as it is), even when the run was stopped.
func (r *applyRun) giveUp(ctx context.Context, lk *target.Lock) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lk.ReleaseWithin())
	defer cancel()
	_ = lk.Release(rctx)
}

// release gives the lock back once the batch is recorded. A failure leaves
// the target right and recorded; only the lock may be left.
func (r *applyRun) release(ctx context.Context, lk *target.Lock) error {
	r.stop.step = stepRelease
	if err := r.env.hooks.run(ctx, r.env.hooks.recorded); err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lk.ReleaseWithin())
	err := lk.Release(rctx)
	cancel()
	if err == nil {
		return nil
	}
	stopped := ""
	if ctx.Err() != nil {
		stopped = fmt.Sprintf(" (the run was stopped meanwhile, %s, and gave the lock up to %s to be given back)", outcome.StopCause(ctx), lk.ReleaseWithin())
	}
	return outcome.Transient.Mark(fmt.Errorf("the batch is applied, verified and recorded in the ledger, but giving back "+
		"the lock failed%s: %w; re-run the batch: a replay writes nothing twice and publishes the output files. A lock left as %s "+
		"is broken by the next run %[4]s after its last heartbeat; a table %[5]s left by this run holds no lock, and the first run "+
		"to take the lock %[4]s after this one drops it (or now: DROP TABLE IF EXISTS %[5]s)",
		stopped, err, lk.Name, lk.Timing.Stale, lk.Aside()))
}
