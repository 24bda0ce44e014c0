package cdc

import (
	"context"
	"fmt"
	"time"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/merge"
)

// verify reads every captured key back (seed task verify_batch): each must
// hold this exact version, or a newer one.
func (t *tableRun) verify(ctx context.Context, rows []*change.Row) error {
	step := time.Now()
	t.stop.step = stepVerify
	actual, err := t.tbl.Read(ctx, rows)
	if err != nil {
		// The insert was sent: say this is the read-back, not the read
		// before it (which wrote nothing).
		return fmt.Errorf("read back after the insert: %w", err)
	}
	verified, err := merge.CompareReadBack(t.m, rows, actual)
	t.res.Verified += verified
	if err != nil {
		return err
	}
	t.res.Verify += time.Since(step)
	return nil
}
