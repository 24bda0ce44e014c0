package cdc

import (
	"context"
	"time"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/internal/testhook"
)

// insert writes the pending rows in one block, while the run still holds
// the lock.
func (t *tableRun) insert(ctx context.Context, pending []*change.Row) error {
	step := time.Now()
	t.stop.step = stepInsert
	if err := testhook.Run(ctx, t.hooks.BeforeInsert); err != nil {
		return err
	}
	if len(pending) > 0 {
		if err := t.lk.Check(ctx); err != nil {
			return err
		}
		if t.hooks.Checked != nil {
			if err := t.hooks.Checked(ctx, "insert"); err != nil {
				return err
			}
		}
		t.stop.sent = true
		if err := t.tbl.Insert(ctx, pending, t.lk.Fence()); err != nil {
			return err
		}
		// The insert is fenced: a lock still this run's after it proves
		// the rows were written under it (target.Fence).
		if err := t.lk.Check(ctx); err != nil {
			return err
		}
	}
	if err := testhook.Run(ctx, t.hooks.AfterInsert); err != nil {
		return err
	}
	t.res.Insert += time.Since(step)
	return nil
}
