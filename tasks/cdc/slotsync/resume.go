package slotsync

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/change"

	"github.com/changesink/changesink/tasks/cdc/pgvalue"
	"github.com/changesink/changesink/tasks/cdc/slot"
	"github.com/changesink/changesink/tasks/cdc/target"
)

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

// prepareLoad decides the load: from the new slot's snapshot, a new
// generation; for a slot that was there and never loaded to the end, the
// load ledger's generation continued (or restarted) from a temporary
// slot's snapshot (a slot the load ledger has no load of is loaded whole
// from it too: a setup killed between the slot and its load's first row).
func (r *syncRun) prepareLoad(ctx context.Context, c created) (*loadRun, error) {
	r.loadLedger = r.ch.LoadLedger(r.order[0].m.Target.Database)
	if err := r.loadLedger.Ensure(ctx); err != nil {
		return nil, err
	}
	if c.snap != nil {
		l := &loadRun{snap: c.snap, point: uint64(c.at), from: uint64(c.at)}
		return l, r.startGeneration(ctx, l)
	}
	rows, err := r.loadLedger.Latest(ctx, r.cfg.Slot, "")
	if err != nil {
		return nil, err
	}
	h, err := slot.ReadHealth(ctx, r.conn.PgConn(), r.cfg.Slot)
	if err != nil {
		return nil, sourceErr(err)
	}
	at := h.Confirmed
	l := &loadRun{from: uint64(at)}
	switch {
	case len(rows) == 0 || rows[0].Kind != target.LoadStart:
		r.log.Warn(fmt.Sprintf("cdc: slot %s exists at %s, but no load of it is recorded (a setup stopped before its load began?): "+
			"loading every table from a new snapshot", r.cfg.Slot, at))
	case rows[0].StreamFrom == l.from && rows[0].SystemID == r.systemID && rows[0].SourceDB == r.source:
		l.gen, l.done, l.continued = rows[0].Gen, rows[1:], true
	default:
		start := rows[0]
		r.log.Warn(fmt.Sprintf("cdc: the load of slot %s in %s (generation %s) was for position %s of database %s of system %s; the slot stands at %s of %s of %s: "+
			"loading every table again", r.cfg.Slot, r.loadLedger.Name(), start.Gen, slot.LSN(start.StreamFrom), start.SourceDB, start.SystemID, at, r.source, r.systemID))
	}
	if !l.continued {
		if err := r.startGeneration(ctx, l); err != nil {
			return nil, err
		}
	}
	snap, err := r.exportTemporary(ctx)
	if err != nil {
		return nil, err
	}
	l.snap, l.point, l.temporary = snap, uint64(snap.ConsistentPoint), true
	if l.continued {
		r.log.Info(fmt.Sprintf("cdc: continuing the load of slot %s (generation %s, %d chunks done): the rest from a new snapshot at %s; the stream starts at %s",
			r.cfg.Slot, l.gen, len(l.done), snap.ConsistentPoint, at))
	}
	return l, nil
}

// startGeneration records a new generation of the load in the load ledger.
func (r *syncRun) startGeneration(ctx context.Context, l *loadRun) error {
	l.gen = newGeneration()
	return r.appendLoad(ctx, target.LoadRow{Slot: r.cfg.Slot, Gen: l.gen, Kind: target.LoadStart, StreamFrom: l.from,
		SystemID: r.systemID, SourceDB: r.source, Holder: r.holderID()})
}

// newGeneration names a new generation of a load: they sort by when they
// began.
func newGeneration() string { return fmt.Sprintf("%020d", time.Now().UnixNano()) }

// appendLoad appends a row to the load ledger, fenced by the first
// target's lock (as the sync ledger's rows), then checks that lock.
func (r *syncRun) appendLoad(ctx context.Context, row target.LoadRow) error {
	lk := r.order[0].run.Lock
	if err := r.loadLedger.Append(ctx, row, lk.Fence()); err != nil {
		return err
	}
	return lk.Check(ctx)
}

// readFloors reads the point each table was loaded at: a transaction
// that commits at or after it was not in that snapshot, and its versions
// are raised above it (commit); one before it is read by belowLoad. A
// published table no load ended for (it joined the publication after the
// slot's load, and cdc setup has not loaded it yet) is refused: streaming
// it would leave its earlier rows out.
func (r *syncRun) readFloors(ctx context.Context) error {
	ll := r.ch.LoadLedger(r.order[0].m.Target.Database)
	if err := ll.Ensure(ctx); err != nil {
		return err
	}
	loads, err := ll.Tables(ctx, r.cfg.Slot)
	if err != nil {
		return err
	}
	for _, t := range r.order {
		tl, ok := loads[t.name()]
		if !ok || !tl.Done {
			return outcome.Refused.Mark(fmt.Errorf("%w: table %s joined publication %s after the load of slot %s, and no load of it ended",
				change.ErrNotLoaded, t.name(), r.cfg.Publication, r.cfg.Slot))
		}
		if otherTable(tl, t) {
			return outcome.Refused.Mark(fmt.Errorf("%w: table %s (OID %d) was dropped and created again since its load (of OID %d)",
				change.ErrNotLoaded, t.name(), t.src.oid, tl.Relid))
		}
		t.floor = tl.Point
	}
	return nil
}

// slotsWait is how long a load waits for a free replication slot for its
// temporary one: the run killed before it may still hold its own until
// the server sees its connection gone.
const slotsWait = 30 * time.Second

// exportTemporary creates the temporary slot of a continued load and
// returns its snapshot, waiting up to slotsWait for a free slot.
func (r *syncRun) exportTemporary(ctx context.Context) (*slot.Snapshot, error) {
	pg := r.cfg.source.Config.Copy()
	if pg.RuntimeParams == nil {
		pg.RuntimeParams = map[string]string{}
	}
	maps.Copy(pg.RuntimeParams, pgvalue.Settings())
	name := fmt.Sprintf("changesink_load_%d_%d", os.Getpid(), time.Now().UnixNano()%1_000_000_000)
	deadline := time.Now().Add(slotsWait)
	for {
		snap, err := slot.ExportTemporary(ctx, pg, name)
		var pgErr *pgconn.PgError
		full := errors.As(err, &pgErr) && pgErr.Code == pgerrcode.ConfigurationLimitExceeded
		switch {
		case err == nil:
			return snap, nil
		case full && time.Now().After(deadline):
			return nil, outcome.Config.Mark(fmt.Errorf("continue the load of slot %s: a temporary slot for its snapshot, still after %s: %w: %w",
				r.cfg.Slot, slotsWait, slot.ErrNoSlotRoom, err))
		case !full:
			// Its own class: a lost connection is transient, a refused
			// login configuration.
			return nil, fmt.Errorf("continue the load of slot %s: %w", r.cfg.Slot, err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// belowLoad reads a change of a transaction that committed before the
// load's highest point, after a load continued across snapshots: every
// row the source held at that point is in the target at it or at an
// earlier point it had not changed since (the chunks read before were
// read again for the tuples written since), so only the rows removed
// before the point need the stream: a delete, or the old key of an update
// that changed the key. Inserts and updates are in the loaded rows (and
// their unchanged TOAST values, which the stream does not carry, with
// them).
func (r *syncRun) belowLoad(t *syncTable, ev *slot.Event, lsn uint64) error {
	switch ev.Kind {
	case slot.KindDelete:
		return t.read(ev.Old, change.OpDelete, ev.OldKind == slot.OldFull, lsn)
	case slot.KindUpdate:
		if ev.OldKind == 0 {
			return nil
		}
		oldKey, err := t.keyOf(ev.Old)
		if err != nil {
			return err
		}
		newKey, err := t.keyOf(ev.New)
		if err != nil || oldKey == newKey {
			return err
		}
		return t.read(ev.Old, change.OpDelete, ev.OldKind == slot.OldFull, lsn)
	}
	return nil
}
