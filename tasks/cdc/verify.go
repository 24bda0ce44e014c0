package cdc

import (
	"context"
	"time"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/merge"
	"github.com/changesink/changesink/tasks/cdc/target"
)

// verify reads every captured key back (seed task verify_batch): each must
// hold this exact version, or a newer one.
func (r *applyRun) verify(ctx context.Context, tbl *target.Table, rows []*change.Row) error {
	step := time.Now()
	r.stop.step = stepVerify
	actual, err := tbl.Read(ctx, rows)
	if err != nil {
		return err
	}
	if r.res.Verified, err = merge.CompareReadBack(tbl.M, rows, actual); err != nil {
		return err
	}
	r.res.Verify = time.Since(step)
	return nil
}
