package slotsync

import (
	"context"
	"fmt"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/slot"
)

// deleteGone deletes, once every table is loaded, every key a target
// holds live below from, the slot's consistent point, where the stream
// starts: keys no chunk of the load holds, which the source deleted before
// it. A target the trigger flow fed (a switch-over), or an earlier load's
// of another slot (a setup after a slot was lost, dropped or moved ahead),
// holds such keys; without this they would stay live for ever, as no
// change of theirs comes after the snapshot. It is a TRUNCATE at from,
// applied as the stream applies one: the loaded rows are at from or at a
// continued load's later point, not below, and rows a writer wrote at
// newer versions stay. A target that held no row when the load began
// (refuseNewer) is skipped: the load's rows are all it holds.
func (r *syncRun) deleteGone(ctx context.Context, which []*syncTable, from uint64) error {
	for _, t := range which {
		if !t.held {
			continue
		}
		// Its commit floor just below from keeps it at that version (an
		// unfloored change would be placed after the snapshot).
		row := change.Row{Deleted: true, Meta: change.Meta{Op: change.OpTruncate, LSN: from, DeletedSet: true,
			Commit: from - 1, CommitSet: true, Sequenced: true}}
		row.Meta.Sum, _ = change.EventSum(nil, &row)
		if err := t.batch.Add(row); err != nil {
			return outcome.Refused.Mark(fmt.Errorf("table %s: %w", t.name(), err))
		}
		// The table's counts stay the load's: the deletion is logged.
		before := t.res
		if err := t.apply(ctx); err != nil {
			return err
		}
		n := t.res.Deletes - before.Deletes
		t.res = before
		if n > 0 {
			r.log.Info(fmt.Sprintf("cdc: deleted %d keys of %s that the snapshot of %s does not hold (written before the load, deleted since)",
				n, mapping.Qualified(t.m.Target.Database, t.m.Target.Table), t.name()))
		}
	}
	return nil
}

// refuseNewer refuses a load from a snapshot at point into targets that
// hold a version above it: the load's rows would lose
// to them, and the target would keep rows the snapshot contradicts. They
// are another PostgreSQL system's (a restore or a failover, whose LSNs
// are not this one's) or a writer's still running (the trigger flow, not
// disabled before the switch-over). Nothing is written.
func (r *syncRun) refuseNewer(ctx context.Context, which []*syncTable, point uint64) error {
	for _, t := range which {
		high, err := t.run.Tbl.HighestVersion(ctx)
		if err != nil {
			return tableErr(t, err)
		}
		t.held = high > 0
		if high > point {
			return outcome.Refused.Mark(fmt.Errorf("%w: table %s: %s holds version %d, above the load's point %s (%d) of slot %s: "+
				"rows of another PostgreSQL system or of a writer still running", change.ErrOtherSource, t.name(),
				mapping.Qualified(t.m.Target.Database, t.m.Target.Table), high, slot.LSN(point), point, r.cfg.Slot))
		}
	}
	return nil
}
