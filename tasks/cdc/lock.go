package cdc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/internal/testhook"
	"github.com/changesink/changesink/tasks/cdc/target"
)

// lock takes the target's lock: one writer per target, everything from
// the reads to the ledger row happens under it. Locks other runs left
// aside are swept once it is held.
func (r *applyRun) lock(ctx context.Context, tbl *target.Table) (*target.Lock, error) {
	timing := r.env.hooks.Timing()
	r.stop.step = stepLock
	lk, err := tbl.Lock(ctx, timing, r.env.log())
	if err != nil {
		return nil, err
	}
	r.stop.step = stepRead
	if err := testhook.Run(ctx, r.env.hooks.Locked); err != nil {
		r.giveUp(ctx, lk)
		return nil, err
	}
	if err := lk.SweepAsides(ctx, r.env.log()); err != nil {
		r.giveUp(ctx, lk)
		return nil, err
	}
	return lk, nil
}

// lockFirst puts a lost lock in place of a refusal: a run whose lock was
// broken (it froze past the lock's stale time) read a target that the run
// which broke it has written since, so what it refused (versions gone
// backwards, a conflict) is moot, and its remedy would mislead. The lock
// lost is what to say.
func lockFirst(ctx context.Context, lk *target.Lock, err error, log *slog.Logger) error {
	if err == nil || outcome.Classify(err) != outcome.Refused {
		return err
	}
	if lost := lk.Check(ctx); errors.Is(lost, change.ErrTargetLocked) {
		log.Info(fmt.Sprintf("cdc: after losing the lock, this run had refused the batch (moot: another run wrote meanwhile): %v", err))
		return lost
	}
	return err
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
