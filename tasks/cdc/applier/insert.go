package applier

import (
	"context"
	"time"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/internal/testhook"
)

// Insert writes the pending rows in one block, while the run still holds
// the lock.
func (t *Table) Insert(ctx context.Context, pending []*change.Row) error {
	step := time.Now()
	t.Stop.Step = StepInsert
	if err := testhook.Run(ctx, t.Hooks.BeforeInsert); err != nil {
		return err
	}
	if len(pending) > 0 {
		if err := t.Lock.Check(ctx); err != nil {
			return err
		}
		if t.Hooks.Checked != nil {
			if err := t.Hooks.Checked(ctx, "insert"); err != nil {
				return err
			}
		}
		t.Stop.Sent = true
		if err := t.Tbl.Insert(ctx, pending, t.Lock.Fence()); err != nil {
			return err
		}
		// The insert is fenced: a lock still this run's after it proves
		// the rows were written under it (target.Fence).
		if err := t.Lock.Check(ctx); err != nil {
			return err
		}
	}
	if err := testhook.Run(ctx, t.Hooks.AfterInsert); err != nil {
		return err
	}
	t.Res.Insert += time.Since(step)
	return nil
}
