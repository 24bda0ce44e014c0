package slotsync

import (
	"context"
	"fmt"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/initload"
	"github.com/changesink/changesink/tasks/cdc/internal/testhook"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/slot"
	"github.com/changesink/changesink/tasks/cdc/target"
)

// loadTables loads the tables which from l's snapshot (initload), versioned
// at its point: the chunks earlier runs did are read again as deltas, each
// block inserted into its target fenced by the target's lock, each chunk
// recorded in the load ledger once inserted, then each target counted.
func (r *loader) loadTables(ctx context.Context, l *loadRun, which []*syncTable) error {
	tables := make([]*initload.Table, len(which))
	for i, t := range which {
		lt, err := r.loadTable(t, l)
		if err != nil {
			return err
		}
		tables[i] = lt
	}
	if err := testhook.Run(ctx, r.env.Hooks.Loading); err != nil {
		return err
	}
	stats, err := initload.Load(ctx, initload.Config{Source: r.cfg.source, Conn: r.conn, Snapshot: l.snap, SnapshotName: l.snap.Name,
		Point: l.point, Workers: r.cfg.LoadWorkers, ChunkRows: r.env.Hooks.LoadChunkRows, BlockRows: r.env.Hooks.LoadBlockRows, Log: r.log}, tables)
	if err != nil {
		return err
	}
	r.loaded = stats
	return nil
}

// loadTable is the load of t from l's snapshot: its source columns and
// their decoders (the stream's), the chunks of it the load ledger holds,
// and where its blocks and chunks go.
func (r *loader) loadTable(t *syncTable, l *loadRun) (*initload.Table, error) {
	rel := &slot.Relation{ID: t.src.oid, Namespace: t.src.schema, Name: t.src.name, Identity: t.src.identity}
	cols := make([]string, len(t.src.cols))
	for i, col := range t.src.cols {
		cols[i] = col.Name
		rel.Columns = append(rel.Columns, slot.Column{Name: col.Name, TypeOID: col.TypeOID, TypeMod: col.TypeMod, Key: col.Key})
	}
	if err := t.decoders(rel); err != nil {
		return nil, err
	}
	for j := range t.m.Cols {
		if !t.m.Cols[j].Type.Nullable && !t.has(j) {
			return nil, outcome.Refused.Mark(fmt.Errorf("table %s: %w: the source has no column %q, which is not Nullable in the target",
				t.name(), change.ErrSchemaChange, t.m.Cols[j].Name))
		}
	}
	lt := &initload.Table{Schema: t.src.schema, Name: t.src.name, OID: t.src.oid, Columns: cols, M: t.m, Decoders: t.decs, At: t.at}
	for _, d := range l.done {
		if d.Kind == target.LoadChunk && d.Table == t.name() {
			lt.Done = append(lt.Done, initload.Chunk{N: int(d.Chunk), Step: d.Step, Lo: d.Lo, Hi: d.Hi, Filenode: d.Filenode, Point: d.Point,
				Xmin: d.Xmin, Delta: d.Delta, Rows: d.Rows, Bytes: d.Bytes})
		}
	}
	lt.Insert = func(ctx context.Context, cols [][]change.Value) error {
		if err := t.run.Tbl.InsertLoad(ctx, cols, l.point, t.run.Lock.Fence()); err != nil {
			return fmt.Errorf("table %s: %w", t.name(), err)
		}
		return t.run.Lock.Check(ctx)
	}
	lt.Record = func(ctx context.Context, c initload.Chunk) error {
		return r.appendLoad(ctx, target.LoadRow{Slot: r.cfg.Slot, Gen: l.gen, Kind: target.LoadChunk, Table: t.name(), Chunk: uint32(c.N),
			Step: c.Step, Lo: c.Lo, Hi: c.Hi, Filenode: c.Filenode, Point: c.Point, Xmin: c.Xmin, Delta: c.Delta, Rows: c.Rows, Bytes: c.Bytes,
			Holder: r.holderID(), Relid: uint64(t.src.oid)})
	}
	lt.Loaded = func(ctx context.Context) error { return r.checkLoaded(ctx, t, lt, l.point) }
	return lt, nil
}

// checkLoaded counts the target's winning rows at the load's point: every
// row copied, unless the target held newer versions already (then it
// says how many of the load's rows won).
func (r *loader) checkLoaded(ctx context.Context, t *syncTable, lt *initload.Table, point uint64) error {
	c, err := t.run.Tbl.CountLoad(ctx, point)
	if err != nil {
		return err
	}
	rows := lt.Rows()
	t.res.Events, t.res.Keys, t.res.Pending, t.res.Verified = rows, rows, int64(c.At), int64(c.At)
	name := mapping.Qualified(t.m.Target.Database, t.m.Target.Table)
	if lt.Earlier() > 0 {
		// Rows of the earlier chunks are at an earlier point, and a row
		// moved between chunks may be in both: the count proves nothing.
		r.log.Info(fmt.Sprintf("cdc: loaded %s into %s: %d rows in %d chunks (%d of them the changes since an earlier run read them), %d live at %s",
			t.name(), name, rows, lt.Chunks(), lt.Earlier(), c.At, slot.LSN(point)))
		return nil
	}
	if c.Newer == 0 && int64(c.At) != rows {
		return outcome.Refused.Mark(fmt.Errorf("%w: table %s: %d rows copied, but %s holds %d live rows at %s",
			change.ErrVerify, t.name(), rows, name, c.At, slot.LSN(point)))
	}
	r.log.Info(fmt.Sprintf("cdc: loaded %s into %s: %d rows in %d chunks, %d live at %s (%d newer kept), counted",
		t.name(), name, rows, lt.Chunks(), c.At, slot.LSN(point), c.Newer))
	return nil
}

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
func (r *loader) deleteGone(ctx context.Context, which []*syncTable, from uint64) error {
	for _, t := range which {
		if !t.hadRows {
			continue
		}
		if err := t.batch.Add(goneMarker(from)); err != nil {
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
func (r *loader) refuseNewer(ctx context.Context, which []*syncTable, point uint64) error {
	for _, t := range which {
		high, err := t.run.Tbl.HighestVersion(ctx)
		if err != nil {
			return tableErr(t, err)
		}
		t.hadRows = high > 0
		if high > point {
			return outcome.Refused.Mark(fmt.Errorf("%w: table %s: %s holds version %d, above the load's point %s (%d) of slot %s: "+
				"rows of another PostgreSQL system or of a writer still running", change.ErrOtherSource, t.name(),
				mapping.Qualified(t.m.Target.Database, t.m.Target.Table), high, slot.LSN(point), point, r.cfg.Slot))
		}
	}
	return nil
}
