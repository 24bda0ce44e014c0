package slotsync

import (
	"context"
	"fmt"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/applier"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/slot"
	"github.com/changesink/changesink/tasks/cdc/target"
)

// Every rule about a position of the WAL is in this file: where the slot
// may stand against the sync ledger (checkPosition), when a run is caught
// up (caughtUp) and where an idle slot is confirmed (confirmIdle); the
// points a load versions its rows at and where the stream after it starts
// (loadRun: slotLoad, fromTemporary); the floors that keep versions in
// commit order across a load (readFloors, raiseFloor, inLoad, belowLoad);
// and the delete markers of the keys a load did not find (goneBelow,
// goneMarker). A version is a change's place in commit order
// (change.Raise): a transaction's changes are versioned above its commit
// floor, the end of the commit before it (flush.commit; a run's first is
// where the slot stood, openSource).

// checkPosition compares where the slot stands with what the sync ledger
// says the targets hold. The slot at the ledger's position, or behind it (a
// confirm that was lost: what comes again is skipped, applied), is
// streamed; a slot ahead of it lost changes sync never applied
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
	if last != nil {
		r.f.floor = max(r.f.floor, last.Through)
	}
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
			"the transactions between come again and are skipped (applied)", r.cfg.Slot, r.startedAt, slot.LSN(last.Through)))
	}
	return r.readFloors(ctx)
}

// ledgerName is the sync ledger's name, for messages.
func (r *syncRun) ledgerName() string {
	return r.order[0].m.Target.Database + "._changesink_sync"
}

// caughtUp reports that the run has every transaction that committed
// before it began: the server says it has decoded past the WAL's end at
// the run's start (a keepalive between transactions), or the last commit
// read ends past it. A quiet stream alone is not caught up: after a
// restart the server may decode for a while, skipping what was confirmed,
// before it sends anything.
func (r *syncRun) caughtUp() bool {
	return r.seen >= r.caughtUpAt || slot.LSN(r.f.through) >= r.caughtUpAt
}

// confirmIdle moves a caught-up slot to the server's keepalive position,
// so a publication that is quiet while the rest of the database writes
// does not pin the WAL: nothing is pending (no transaction open, the last
// flush applied), and every transaction of the publications committed
// before that position has been delivered. The position is recorded in the
// sync ledger first, as a flush of no changes.
func (r *syncRun) confirmIdle(ctx context.Context) error {
	pos, ok := r.stream.IdlePosition()
	if !ok || r.open || r.f.transactions > 0 {
		return nil
	}
	if uint64(pos) <= r.last.Through {
		return nil
	}
	r.stop.Step = applier.StepLedger
	e := target.SyncEntry{Slot: r.cfg.Slot, Holder: r.holderID(), SystemID: r.systemID, SourceDB: r.source, Through: uint64(pos), Tables: "{}"}
	if err := r.appendLedger(ctx, &e); err != nil {
		return err
	}
	r.last = &e
	r.stop.Step = applier.StepConfirm
	if err := r.stream.Confirm(ctx, pos); err != nil {
		return err
	}
	r.f.floor = uint64(pos)
	return nil
}

// A load killed or stopped before its end leaves the slot at its
// consistent point (nothing confirmed it: the sync ledger has no row of
// it) and its finished chunks in the load ledger. The next cdc setup
// continues it from a new snapshot: a temporary slot's, on the same WAL,
// whose consistent point (the new load point) is at or after the slot's.
// Rows read under it are versioned at the new point. That is consistent
// with the stream, which starts at the slot's point and carries every
// change after it: a transaction that committed before the new point is in
// the new snapshot and its streamed versions are below the point (they
// lose to the rows loaded there, which hold their outcome); one that
// committed at or after it is not in the snapshot, and the sync raises its
// versions above the point (Sync reads it from the load ledger). Chunks
// done at the old point stay: every change since that point is streamed.
// A table rewritten between the runs (VACUUM FULL, CLUSTER: its storage,
// pg_relation_filenode, changed) has moved rows between pages, so all of
// its chunks are read again. A load ledger whose generation is of another
// position of the slot (the slot was made again) or another source, or no
// generation at all, is not continued: the load restarts, every chunk,
// and says so.

// loadRun is the load of this run: the snapshot and the point its rows
// are versioned at, the stream position the sync starts from, the load
// ledger's generation and what earlier runs of it did.
type loadRun struct {
	snap      *slot.Snapshot
	point     uint64
	from      uint64
	gen       string
	done      []target.LoadRow
	temporary bool // snap is a temporary slot's, released after the load
	continued bool
}

func (l *loadRun) release() {
	if l != nil && l.temporary {
		l.snap.Release()
	}
}

// slotLoad is the load of the slot c created: its rows at the slot's
// consistent point, where the stream starts too; nothing between.
func slotLoad(c created) *loadRun {
	return &loadRun{snap: c.snap, point: uint64(c.at), from: uint64(c.at)}
}

// fromTemporary reads l from a temporary slot's snapshot, made after the
// slot stood at l.from: its consistent point, at or after l.from, is the
// load's point, which its rows are versioned at; the stream still starts
// at l.from, and the transactions between are in the snapshot (below the
// point: belowLoad) or after it (raised above it: raiseFloor).
func (l *loadRun) fromTemporary(snap *slot.Snapshot) {
	l.snap, l.point, l.temporary = snap, uint64(snap.ConsistentPoint), true
}

// goneBelow is the point below which deleteGone deletes the keys the
// load did not write. The slot's own load: where the stream starts (from),
// which carries every change after it, the load's rows at from or at a
// continued load's later point. A table that joined the publication
// (joined): the same for a load it continues; one begun again from nothing
// leaves no row of an earlier one, so every key below its own point it did
// not write is gone.
func (l *loadRun) goneBelow(joined bool) uint64 {
	if joined && !l.continued {
		return l.point
	}
	return l.from
}

// goneMarker is the delete marker deleteGone applies for the keys a load
// from the stream's start from did not write: a TRUNCATE at from, its
// commit floor just below from, which keeps it at that version (an
// unfloored change would be placed after the snapshot).
func goneMarker(from uint64) change.Row {
	row := change.Row{Deleted: true, Meta: change.Meta{Op: change.OpTruncate, LSN: from, DeletedSet: true,
		Commit: from - 1, CommitSet: true, Sequenced: true}}
	row.Meta.Sum, _ = change.EventSum(nil, &row)
	return row
}

// readFloors reads each table's state from the load ledger: the point its
// load versioned its rows at, its floor (a transaction that commits at or
// after it was not in that snapshot, and its versions are raised above
// it: raiseFloor; one before it is read by belowLoad); a hold later than
// its load (holdTable); and whether it waits for a load of its own: a
// published table no load ended for (it joined the publication after the
// slot's load, and its load has not ended) or whose load was of another
// table of its name (dropped and created again). Such a table is loaded
// before the stream is read (prepareStream): streaming it before would
// leave its earlier rows out.
func (r *syncRun) readFloors(ctx context.Context) error {
	ll := r.ledgerOfLoads()
	if err := ll.Ensure(ctx); err != nil {
		return err
	}
	loads, err := ll.Tables(ctx, r.cfg.Slot)
	if err != nil {
		return err
	}
	for _, t := range r.order {
		tl, ok := loads[t.name()]
		t.hold = target.LoadRow{}
		if tl.Held {
			t.hold = tl.Hold
		}
		switch {
		case !ok || !tl.Done:
			t.resync = orWhy(t.resync, fmt.Sprintf("it joined publication %s after the load of slot %s, and no load of it ended",
				r.cfg.Publication, r.cfg.Slot))
		case otherTable(tl, t):
			t.resync = orWhy(t.resync, fmt.Sprintf("table OID %d was dropped and created again since its load (of OID %d)", t.src.oid, tl.Relid))
		}
		t.floor = tl.Point
	}
	return nil
}

// orWhy is why, or next when there is none yet.
func orWhy(why, next string) string {
	if why != "" {
		return why
	}
	return next
}

// raiseFloor raises the flush's commit floor for the transaction that
// commits at c to the load point of every table whose load it is not in:
// a transaction that commits at or after a table's floor is not in the
// snapshot its load read, so its changes are newer than the loaded rows,
// whatever their positions.
func (r *syncRun) raiseFloor(c slot.Commit) {
	for _, t := range r.order {
		if uint64(c.LSN) >= t.floor && r.f.floor < t.floor {
			r.f.floor = t.floor
		}
	}
}

// applied reports that the transaction tx commits before the sync
// ledger's position: an earlier flush applied it, verified it and
// recorded the position, and only its confirm was lost (a kill before it,
// or a stream closed before the server read it: restartAt). The slot
// sends it again; it is skipped whole, its definitions too (the targets
// follow them already: relation), not decoded again and compared as a
// replay, which under the definitions of its time would undo a schema
// change the target followed.
func (r *syncRun) applied(tx slot.Begin) bool {
	return r.last != nil && uint64(tx.FinalLSN) < r.last.Through
}

// skipReplayed skips an event of a transaction the targets hold
// (applied): at its commit, the server has decoded past it, the next
// transaction's versions are above it, and the slot is confirmed there
// (the confirm that was lost).
func (r *syncRun) skipReplayed(ctx context.Context, ev *slot.Event) error {
	if ev.Kind != slot.KindCommit {
		return nil
	}
	end := ev.Commit.End
	if r.replayed == 0 {
		r.log.Info(fmt.Sprintf("cdc: slot %s sends again transactions the targets hold (through %s, sync ledger row %d): skipped",
			r.cfg.Slot, slot.LSN(r.last.Through), r.last.Seq))
	}
	r.replayed++
	r.open, r.replay = false, false
	r.seen = max(r.seen, end)
	r.f.floor = max(r.f.floor, uint64(end))
	r.stop.Step = applier.StepConfirm
	if err := r.stream.Confirm(ctx, min(end, slot.LSN(r.last.Through))); err != nil {
		return err
	}
	r.stop.Step = applier.StepStream
	return nil
}

// inLoad reports that the transaction being read committed before t's
// load point: its changes are in the rows the load read (belowLoad).
func (r *syncRun) inLoad(t *syncTable) bool { return uint64(r.tx.FinalLSN) < t.floor }

// belowLoad reads a change of a transaction that committed before the
// load's highest point, after a load continued across snapshots: every
// row the source held at that point is in the target at it or at an
// earlier point it had not changed since (the chunks read before were
// read again for the tuples written since), so only the rows removed
// before the point need the stream: a delete, or the old key of an update
// that changed the key. Inserts and updates are in the loaded rows (and
// their unchanged TOAST values, which the stream does not carry, with
// them).
//
// A change whose key the mapping cannot read there (a definition from
// before a change a resync took in: another key, another type) is
// skipped: such a resync read everything at one point, which holds its
// outcome.
func (r *syncRun) belowLoad(t *syncTable, ev *slot.Event, lsn uint64) error {
	if t.keyless {
		return nil
	}
	switch ev.Kind {
	case slot.KindDelete:
		if err := t.read(ev.Old, change.OpDelete, ev.OldKind == slot.OldFull, lsn); err != nil && !holdable(err) {
			return err
		}
	case slot.KindUpdate:
		if ev.OldKind == 0 {
			return nil
		}
		oldKey, err := t.keyOf(ev.Old)
		if err != nil {
			return nil
		}
		if newKey, err := t.keyOf(ev.New); err != nil || oldKey == newKey {
			return nil
		}
		if err := t.read(ev.Old, change.OpDelete, ev.OldKind == slot.OldFull, lsn); err != nil && !holdable(err) {
			return err
		}
	}
	return nil
}
