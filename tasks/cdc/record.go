package cdc

import (
	"context"
)

// record appends the batch's ledger row, unless it is a replay of a batch
// the ledger holds, while the run still holds the lock.
func (t *tableRun) record(ctx context.Context, rd reading, sel selection) error {
	t.stop.step = stepLedger
	if rd.led.Replay != nil {
		return nil
	}
	if err := t.lk.Check(ctx); err != nil {
		return err
	}
	if t.hooks.Checked != nil {
		if err := t.hooks.Checked(ctx, "ledger"); err != nil {
			return err
		}
	}
	if err := t.tbl.RecordBatch(ctx, rd.led.Last, rd.b.Entry(t.lk.ID, sel.src, rd.rows, len(sel.Pending), rd.open, rd.led.Last), t.lk.Fence()); err != nil {
		return err
	}
	// The ledger row is fenced: a lock still this run's after it proves
	// the row was written under it (target.Fence).
	return t.lk.Check(ctx)
}
