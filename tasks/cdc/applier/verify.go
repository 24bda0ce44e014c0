package applier

import (
	"context"
	"fmt"
	"time"

	"github.com/changesink/changesink/tasks/cdc/merge"
)

// Verify reads every key of rd back (seed task verify_batch): each must
// hold this exact version, or a newer one.
func (t *Table) Verify(ctx context.Context, rd Reading) error {
	step := time.Now()
	t.Stop.Step = StepVerify
	rows := rd.rows
	actual, err := t.Tbl.Read(ctx, rows)
	if err != nil {
		// The insert was sent: say this is the read-back, not the read
		// before it (which wrote nothing).
		return fmt.Errorf("read back after the insert: %w", err)
	}
	verified, err := merge.CompareReadBack(t.M, rows, actual)
	t.Res.Verified += verified
	if err != nil {
		return err
	}
	t.Res.Verify += time.Since(step)
	return nil
}
