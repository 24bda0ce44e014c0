package cdc

import (
	"context"
	"time"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/target"
)

// insert writes the pending rows in one block, while the run still holds
// the lock.
func (r *applyRun) insert(ctx context.Context, tbl *target.Table, lk *target.Lock, pending []*change.Row) error {
	step := time.Now()
	r.stop.step = stepInsert
	if err := r.env.hooks.run(ctx, r.env.hooks.beforeInsert); err != nil {
		return err
	}
	if len(pending) > 0 {
		if err := lk.Check(ctx); err != nil {
			return err
		}
		r.stop.sent = true
		if err := tbl.Insert(ctx, pending); err != nil {
			return err
		}
	}
	if err := r.env.hooks.run(ctx, r.env.hooks.afterInsert); err != nil {
		return err
	}
	r.res.Insert = time.Since(step)
	return nil
}
