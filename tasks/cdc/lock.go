package cdc

import (
	"context"
	"fmt"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/applier"
	"github.com/changesink/changesink/tasks/cdc/internal/testhook"
	"github.com/changesink/changesink/tasks/cdc/target"
)

// lock takes the target's lock: one writer per target, everything from
// the reads to the ledger row happens under it. Locks other runs left
// aside are swept once it is held.
func (r *applyRun) lock(ctx context.Context, tbl *target.Table) (*target.Lock, error) {
	timing := r.env.hooks.Timing()
	r.stop.Step = applier.StepLock
	lk, err := tbl.Lock(ctx, timing, r.env.log())
	if err != nil {
		return nil, err
	}
	r.stop.Step = applier.StepRead
	if err := testhook.Run(ctx, r.env.hooks.Locked); err != nil {
		applier.GiveBack(ctx, lk)
		return nil, err
	}
	if err := lk.SweepAsides(ctx, r.env.log()); err != nil {
		applier.GiveBack(ctx, lk)
		return nil, err
	}
	return lk, nil
}

// release gives the lock back once the batch is recorded. A failure leaves
// the target right and recorded; only the lock may be left.
func (r *applyRun) release(ctx context.Context, lk *target.Lock) error {
	r.stop.Step = applier.StepRelease
	if err := testhook.Run(ctx, r.env.hooks.Recorded); err != nil {
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
		stopped = fmt.Sprintf(" (stopped meanwhile, %s; waited up to %s)", outcome.StopCause(ctx), lk.ReleaseWithin())
	}
	return outcome.Transient.Mark(fmt.Errorf("%w%s: %w; the lock is %s (broken %s after its last heartbeat) or %s (dropped by the next run)",
		errNotReleased, stopped, err, lk.Name, lk.Timing.Stale, lk.Aside()))
}
