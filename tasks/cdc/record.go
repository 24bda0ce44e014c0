package cdc

import (
	"context"

	"github.com/changesink/changesink/tasks/cdc/target"
)

// record appends the batch's ledger row, unless it is a replay of a batch
// the ledger holds, while the run still holds the lock.
func (r *applyRun) record(ctx context.Context, tbl *target.Table, lk *target.Lock, rd reading, sel selection) error {
	r.stop.step = stepLedger
	if rd.led.Replay != nil {
		return nil
	}
	if err := lk.Check(ctx); err != nil {
		return err
	}
	return tbl.RecordBatch(ctx, rd.led.Last, rd.b.Entry(lk.ID, sel.src, rd.rows, len(sel.Pending), rd.open, rd.led.Last))
}
