package applier

import (
	"context"
)

// Record appends the batch's ledger row, unless it is a replay of a batch
// the ledger holds, while the run still holds the lock.
func (t *Table) Record(ctx context.Context, rd Reading, sel Selection) error {
	t.Stop.Step = StepLedger
	if rd.led.Replay != nil {
		return nil
	}
	if err := t.Lock.Check(ctx); err != nil {
		return err
	}
	if t.Hooks.Checked != nil {
		if err := t.Hooks.Checked(ctx, "ledger"); err != nil {
			return err
		}
	}
	if err := t.Tbl.RecordBatch(ctx, rd.led.Last, rd.b.Entry(t.Lock.ID, sel.src, rd.rows, len(sel.Pending), rd.open, rd.led.Last), t.Lock.Fence()); err != nil {
		return err
	}
	// The ledger row is fenced: a lock still this run's after it proves
	// the row was written under it (target.Fence).
	return t.Lock.Check(ctx)
}
