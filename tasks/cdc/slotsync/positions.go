package slotsync

import (
	"context"
	"fmt"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/slot"
)

// checkPosition compares where the slot stands with what the sync ledger
// says the targets hold. The slot at the ledger's position, or behind it (a
// confirm that was lost: what comes again is a replay, which the versions
// skip), is streamed; a slot ahead of it lost changes sync never applied
// (another consumer confirmed them), and a ledger without the slot or of
// another source means the targets were not loaded from this slot: both
// are refused, nothing written.
func (r *syncRun) checkPosition(ctx context.Context) error {
	if err := r.ledger.Ensure(ctx); err != nil {
		return err
	}
	last, err := r.ledger.Last(ctx, r.cfg.Slot)
	if err != nil {
		return err
	}
	r.last = last
	at := uint64(r.startedAt)
	switch {
	case last == nil:
		return outcome.Refused.Mark(fmt.Errorf("%w: slot %s (at %s) has no row in the sync ledger %s",
			change.ErrNotLoaded, r.cfg.Slot, r.startedAt, r.ledgerName()))
	case last.SystemID != r.systemID || last.SourceDB != r.source:
		return outcome.Refused.Mark(fmt.Errorf("%w: slot %s: the sync ledger %s holds database %s of system %s, the source is %s of system %s",
			change.ErrOtherSource, r.cfg.Slot, r.ledgerName(), last.SourceDB, last.SystemID, r.source, r.systemID))
	case at > last.Through:
		return outcome.Refused.Mark(fmt.Errorf("%w: slot %s is confirmed at %s, but the targets hold the stream up to %s (sync ledger %s, row %d)",
			change.ErrSlotAhead, r.cfg.Slot, r.startedAt, slot.LSN(last.Through), r.ledgerName(), last.Seq))
	case at < last.Through:
		r.log.Info(fmt.Sprintf("cdc: slot %s is confirmed at %s, behind the %s the targets hold (a confirm was lost): "+
			"the transactions between come again and are skipped as replays", r.cfg.Slot, r.startedAt, slot.LSN(last.Through)))
	}
	return r.readFloors(ctx)
}

// ledgerName is the sync ledger's name, for messages.
func (r *syncRun) ledgerName() string {
	return r.order[0].m.Target.Database + "._changesink_sync"
}
