package applier

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/target"
)

// LockFirst puts a lost lock in place of a refusal: a run whose lock was
// broken (it froze past the lock's stale time) read a target that the run
// which broke it has written since, so what it refused (versions gone
// backwards, a conflict) is moot, and its remedy would mislead. The lock
// lost is what to say.
func LockFirst(ctx context.Context, lk *target.Lock, err error, log *slog.Logger) error {
	if err == nil || outcome.Classify(err) != outcome.Refused {
		return err
	}
	if lost := lk.Check(ctx); errors.Is(lost, change.ErrTargetLocked) {
		log.Info(fmt.Sprintf("cdc: after losing the lock, this run had refused the batch (moot: another run wrote meanwhile): %v", err))
		return lost
	}
	return err
}

// GiveBack gives the lock back after a failure (or after a release, which
// it then leaves as it is), even when the run was stopped: within the
// lock's ReleaseWithin, whatever ctx says; a failure is left to the next
// run, which breaks the lock once stale.
func GiveBack(ctx context.Context, lk *target.Lock) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lk.ReleaseWithin())
	defer cancel()
	_ = lk.Release(rctx)
}
