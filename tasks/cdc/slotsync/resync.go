package slotsync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/applier"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/merge"
	"github.com/changesink/changesink/tasks/cdc/pgvalue"
	"github.com/changesink/changesink/tasks/cdc/slot"
	"github.com/changesink/changesink/tasks/cdc/target"
)

// A resync loads one table again from a new snapshot, the way a table that
// joins the publication is loaded (joined.go): a temporary slot's
// snapshot at a point P after everything the stream skipped of it, its
// rows versioned at P, the stream going on from the slot's position with
// the table's floor at P (its changes below P are in the snapshot). The
// load goes into a table built beside the target (target.Beside), swapped
// in whole (target.SwapIn) with the live view made again over it: readers
// never see a half-loaded table, and the target takes the shape the
// source has now (its columns, types and key). A target that holds no row
// and has that shape already (a table that joined) is loaded in place.
//
// A table waits for a resync when its load has not ended (it joined), when
// the stream reaches a change the target cannot follow in place (at that
// change: the transactions before it applied, resyncAt), when its storage
// was rewritten with values changed where the stream cannot see
// (checkRewrites), when its target lost its rows (setup: lostRows), when
// the mapping entry now maps it otherwise (standing), and when an operator
// asks (CDC_RESYNC). The request is a start row of a generation of its own
// in the load ledger (requestResync), so a run killed before the load
// leaves the table waiting; cdc sync and cdc setup both load every table
// that waits before they go on.
//
// A held table (a hold row later than its load: holdTable) is skipped by
// both until an operator's resync, which reloads it from a snapshot after
// every change skipped, so exactly once holds across the hold.

// resyncAt ends the reading of the stream at the transaction that commits
// at at: table t needs a resync there (why). The run applies the
// transactions before it, resyncs t and reads the stream again from there.
type resyncAt struct {
	t   *syncTable
	why string
	at  slot.LSN
}

func (e *resyncAt) Error() string {
	return fmt.Sprintf("table %s needs a resync at %s: %s", e.t.name(), e.at, e.why)
}

// restartAt applies what the flush holds of the transactions before the
// one being read (which it leaves: it comes again), records that ra.t
// waits for a resync, closes the stream, resyncs, and opens the stream
// again from the slot's confirmed position, unless the run's budget
// ended (then the run ends, the table waiting for the next run).
func (r *syncRun) restartAt(ctx context.Context, ra *resyncAt) error {
	for _, t := range r.order {
		t.open = t.open[:0]
	}
	r.open = false
	if err := r.applyFlush(ctx); err != nil {
		return err
	}
	if err := r.requestResync(ctx, ra.t, ra.why); err != nil {
		return err
	}
	r.log.Warn(fmt.Sprintf("cdc: %v: applied and confirmed the transactions before it; loading the table again from a new snapshot", ra))
	r.closeStream()
	if err := r.resyncWaiting(ctx); err != nil {
		return err
	}
	return r.reopen(ctx)
}

// requestResync records that t waits for a resync (why): a start row of
// a generation of its own in the load ledger, from the slot's position.
func (r *syncRun) requestResync(ctx context.Context, t *syncTable, why string) error {
	var from uint64
	if r.last != nil {
		from = r.last.Through
	}
	ll := r.ledgerOfLoads()
	if err := ll.Ensure(ctx); err != nil {
		return err
	}
	row := target.LoadRow{Slot: r.cfg.Slot, Gen: newGeneration(), Kind: target.LoadStart, Table: t.name(), StreamFrom: from,
		SystemID: r.systemID, SourceDB: r.source, Holder: r.holderID(), Relid: uint64(t.src.oid), Detail: clip(why)}
	if err := ll.Append(ctx, row, r.order[0].run.Lock.Fence()); err != nil {
		return err
	}
	if err := r.order[0].run.Lock.Check(ctx); err != nil {
		return err
	}
	t.resync = why
	return nil
}

// resyncWaiting loads every table that waits for a resync and is not
// held (resync), each alone: a load its source refuses (a value the
// mapping cannot hold) holds that table, and the others go on.
func (r *syncRun) resyncWaiting(ctx context.Context) error {
	for _, t := range r.order {
		if t.resync == "" || t.hold.Gen != "" {
			continue
		}
		ld := &loader{syncRun: r}
		err := ld.resync(ctx, []*syncTable{t})
		if errors.Is(err, pgvalue.ErrWrongType) {
			// The mapping entry cannot read the table as it is now (a
			// column retyped where the stream could not show it, a
			// rewrite): held, as at a change the entry cannot hold.
			err = outcome.Refused.Mark(fmt.Errorf("%w: the mapping entry cannot load the table as it is now: %v", change.ErrSchemaChange, err))
		}
		if holdable(err) {
			at := slot.LSN(0)
			if r.last != nil {
				at = slot.LSN(r.last.Through)
			}
			err = r.holdTable(ctx, t, at, err)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// resync loads the tables which again (see above): the catalog read
// anew, each table mapped as a new target would be, a generation of the
// load (continued when an earlier run began it and the slot has not
// moved), a temporary slot's snapshot; each table loaded beside its target
// and swapped in, or in place (an empty target of the same shape); then
// the done rows, the new shapes, the floors.
func (r *loader) resync(ctx context.Context, which []*syncTable) error {
	r.loadLedger = r.syncRun.ledgerOfLoads()
	if err := r.loadLedger.Ensure(ctx); err != nil {
		return err
	}
	loads, err := r.loadLedger.Tables(ctx, r.cfg.Slot)
	if err != nil {
		return err
	}
	src, err := readCatalog(ctx, r.conn, r.cfg.Publication)
	if err != nil {
		return sourceErr(err)
	}
	now, err := readNow(ctx, r.conn, oidsOf(src))
	if err != nil {
		return sourceErr(err)
	}
	plans := make([]resyncPlan, len(which))
	fresh := false
	for i, t := range which {
		if plans[i], err = r.planResync(ctx, t, src, true); err != nil {
			return err
		}
		fresh = fresh || otherTable(loads[t.name()], t) || r.republished[t.name()]
	}
	l, err := r.prepareJoined(ctx, which, loads, fresh)
	if err != nil {
		return err
	}
	defer l.release()
	inPlace, err := r.prepareTargets(ctx, which, plans, l)
	if err != nil {
		return err
	}
	if err := r.refuseNewer(ctx, inPlace, l.point); err != nil {
		return err
	}
	if err := r.loadTables(ctx, l, which); err != nil {
		return err
	}
	if err := r.deleteGone(ctx, inPlace, l.goneBelow(true)); err != nil {
		return err
	}
	for i, t := range which {
		if err := r.finishResync(ctx, t, plans[i], l, now[t.src.oid]); err != nil {
			return err
		}
	}
	r.res.Changes, r.continued = r.loaded.Rows, l.continued
	return nil
}

// resyncPlan is how one table is loaded again: its catalog entry now, its
// mapping as a new target's, and whether the load goes beside the target.
type resyncPlan struct {
	src     sourceTable
	m       *mapping.Mapping
	rebuild bool
	why     string
}

// prepareTargets prepares each table of which for its load (prepareTarget)
// and returns those loaded in place.
func (r *loader) prepareTargets(ctx context.Context, which []*syncTable, plans []resyncPlan, l *loadRun) ([]*syncTable, error) {
	var inPlace []*syncTable
	for i, t := range which {
		if err := r.prepareTarget(ctx, t, &plans[i], l); err != nil {
			return nil, err
		}
		if !plans[i].rebuild {
			inPlace = append(inPlace, t)
		}
	}
	return inPlace, nil
}

// planResync maps t as a new target would be now; the load goes beside
// the target when its shape is another one, or (whole, a resync) when it
// holds rows.
func (r *loader) planResync(ctx context.Context, t *syncTable, src []sourceTable, whole bool) (resyncPlan, error) {
	i := slices.IndexFunc(src, func(s sourceTable) bool { return s.oid == t.src.oid })
	if i < 0 {
		return resyncPlan{}, outcome.Refused.Mark(fmt.Errorf("%w: table %s (OID %d) is no longer published by %s, or was dropped",
			change.ErrNotLoaded, t.name(), t.src.oid, r.cfg.Publication))
	}
	m, err := mapTable(r.cfg.Mappings, r.source, src[i], r.ch.Caps)
	if err != nil {
		return resyncPlan{}, err
	}
	p := resyncPlan{src: src[i], m: m, why: t.resync, rebuild: !sameColumns(t.m, m)}
	if whole && !p.rebuild {
		high, err := t.run.Tbl.HighestVersion(ctx)
		if err != nil {
			return p, tableErr(t, err)
		}
		p.rebuild = high > 0
	}
	return p, nil
}

// sameColumns reports that a and b map the same columns, in the same
// order, of the same types, with the same key.
func sameColumns(a, b *mapping.Mapping) bool {
	if len(a.Cols) != len(b.Cols) || !slices.Equal(keyNames(a), keyNames(b)) {
		return false
	}
	for i := range a.Cols {
		if a.Cols[i].Name != b.Cols[i].Name || a.Cols[i].Type.DDL(mapping.ServerCaps{}) != b.Cols[i].Type.DDL(mapping.ServerCaps{}) {
			return false
		}
	}
	return true
}

// prepareTarget points t's load at where it goes: for a rebuild, the
// table beside the target for l's generation (made now, or kept with
// the chunks a killed run of the generation loaded into it; when it is
// missing, those chunks are read again), else the target, mapped anew.
func (r *loader) prepareTarget(ctx context.Context, t *syncTable, p *resyncPlan, l *loadRun) error {
	t.src, t.m = p.src, p.m
	srv := r.ch.With(p.m)
	if !p.rebuild {
		tbl, err := srv.CheckSchema(ctx)
		if err != nil {
			return tableErr(t, err)
		}
		t.srv, t.run.M, t.run.Tbl = srv, p.m, tbl
		return nil
	}
	if dropped, err := srv.DropBesides(ctx, l.gen); err != nil {
		return tableErr(t, err)
	} else if len(dropped) > 0 {
		r.log.Info(fmt.Sprintf("cdc: dropped %s, left beside %s by a resync that did not end", strings.Join(dropped, ", "),
			mapping.Qualified(p.m.Target.Database, p.m.Target.Table)))
	}
	bm := *p.m
	bm.Target.Table = target.BesideName(p.m.Target.Table, l.gen)
	st, err := r.ch.With(&bm).Standing(ctx)
	if err != nil {
		return tableErr(t, err)
	}
	bsrv, btbl, err := srv.Beside(ctx, l.gen)
	if errors.Is(err, change.ErrTargetMismatch) && st.Found {
		// Made by a killed run of the generation for the table's shape
		// then; the table changed again since: its chunks go with it.
		if _, err := srv.DropBesides(ctx, ""); err != nil {
			return tableErr(t, err)
		}
		r.log.Info(fmt.Sprintf("cdc: dropped %s, left by a resync that did not end, for a shape the table no longer has",
			mapping.Qualified(bm.Target.Database, bm.Target.Table)))
		st.Found = false
		bsrv, btbl, err = srv.Beside(ctx, l.gen)
	}
	if err != nil {
		return tableErr(t, err)
	}
	if !st.Found {
		// Nothing of the generation's chunks is in the new table: read
		// every chunk of t again.
		l.done = slices.DeleteFunc(l.done, func(d target.LoadRow) bool { return d.Table == t.name() })
	}
	t.srv, t.run.M, t.run.Tbl = bsrv, bsrv.M, btbl
	return nil
}

// swapIn puts the table beside t's target in its place (a rebuild), or
// makes its live view (in place): t maps p's mapping from then on.
func (r *loader) swapIn(ctx context.Context, t *syncTable, p resyncPlan) error {
	srv := r.ch.With(p.m)
	if p.rebuild {
		tbl, err := srv.SwapIn(ctx, t.srv.M.Target.Table)
		if err != nil {
			return tableErr(t, err)
		}
		t.run.Tbl = tbl
	} else if _, err := srv.SyncView(ctx); err != nil {
		return tableErr(t, err)
	}
	t.m, t.srv, t.run.M, t.batch = p.m, srv, p.m, merge.NewBatch(p.m)
	return nil
}

// finishResync ends t's resync: the table beside swapped in, the done row,
// the shape now recorded, the floor at the load's point; t streams on.
func (r *loader) finishResync(ctx context.Context, t *syncTable, p resyncPlan, l *loadRun, now tableNow) error {
	if err := r.swapIn(ctx, t, p); err != nil {
		return err
	}
	if err := r.appendLoad(ctx, target.LoadRow{Slot: r.cfg.Slot, Gen: l.gen, Kind: target.LoadDone, Table: t.name(),
		Point: l.point, Holder: r.holderID(), Relid: uint64(t.src.oid)}); err != nil {
		return err
	}
	t.shape, t.record = shapeOf(p.src, p.m, now), true
	if err := r.recordShape(ctx, t); err != nil {
		return err
	}
	t.floor, t.resync, t.rel = l.point, "", nil
	r.resynced = append(r.resynced, resynced{Table: t.name(), Why: p.why, Point: slot.LSN(l.point), Rows: t.res.Events})
	r.log.Info(fmt.Sprintf("cdc: table %s loaded again (%s) at %s into %s: %d rows", t.name(), p.why, slot.LSN(l.point),
		mapping.Qualified(p.m.Target.Database, p.m.Target.Table), t.res.Events))
	t.res = applier.Counts{}
	return nil
}

// resynced is one table a run loaded again: why, at which point, how many
// rows.
type resynced struct {
	Table, Why string
	Point      slot.LSN
	Rows       int64
}

// holdTable holds t (quarantine) at the transaction that commits at at:
// a hold row in the load ledger, naming the refusal cause; the rows of
// that transaction read so far dropped, and every later change of t
// skipped; the flush's rows of the transactions before it are applied as
// the others'. The run goes on with the other tables and fails at its end
// (heldErr), naming t.
func (r *syncRun) holdTable(ctx context.Context, t *syncTable, at slot.LSN, cause error) error {
	ll := r.ledgerOfLoads()
	if err := ll.Ensure(ctx); err != nil {
		return err
	}
	row := target.LoadRow{Slot: r.cfg.Slot, Gen: newGeneration(), Kind: target.LoadHold, Table: t.name(), Point: uint64(at),
		Holder: r.holderID(), Relid: uint64(t.src.oid), Detail: clip(cause.Error())}
	if err := ll.Append(ctx, row, r.order[0].run.Lock.Fence()); err != nil {
		return err
	}
	if err := r.order[0].run.Lock.Check(ctx); err != nil {
		return err
	}
	t.hold, t.holdErr, t.open = row, cause, t.open[:0]
	r.log.Error(fmt.Sprintf("cdc: table %s is held at %s: %v; its changes are skipped from there until an operator's resync "+
		"(%s=%s); the other tables go on", t.name(), at, cause, EnvResync, t.name()))
	return nil
}

// heldErr is the run's failure when a table is held: the refusal that
// held one in this run, else the hold a table was found in; nil when
// none is held.
func (r *syncRun) heldErr() error {
	var names []string
	var first error
	var found target.LoadRow
	for _, t := range r.order {
		if t.hold.Gen == "" {
			continue
		}
		names = append(names, t.name())
		if first == nil && t.holdErr != nil {
			first = t.holdErr
		}
		if found.Gen == "" {
			found = t.hold
		}
	}
	if len(names) == 0 {
		return nil
	}
	if first != nil {
		return outcome.Refused.Mark(fmt.Errorf("%w: %s: %w", change.ErrHeld, strings.Join(names, ", "), first))
	}
	return outcome.Refused.Mark(fmt.Errorf("%w: %s (since %s: %s)", change.ErrHeld, strings.Join(names, ", "), slot.LSN(found.Point), found.Detail))
}

// holdable reports whether err, a refusal while reading one table's
// change, is that table's source's (a value the mapping cannot hold, an
// unchanged TOAST value nothing can fill, a schema change): the table is
// held, not the slot. A refusal about the targets (another writer,
// versions backwards, a lost lock) stops the run: a resync would hide it.
func holdable(err error) bool {
	if outcome.Classify(err) != outcome.Refused {
		return false
	}
	var re *change.RecordError
	return errors.As(err, &re) || errors.Is(err, change.ErrToast) || errors.Is(err, change.ErrSchemaChange)
}

// checkRewrites compares every streaming table's catalog entry now with
// its fingerprint (judgeRewrite): a harmless rewrite, or changes of
// attributes without one, are taken in (absorb); values rewritten where
// the stream could not place it is a *resyncAt at the slot's position (the
// stream read every change of the table before now: a Relation would have
// come before any change after the rewrite).
func (r *syncRun) checkRewrites(ctx context.Context) error { return r.compareCatalog(ctx, true) }

// absorbCatalog is checkRewrites that only takes in what is harmless: at
// the start of a run a rewrite that changed values is left for the stream
// to place (its next change of the table comes after a definition, and
// the transactions before it are applied first), or for the end of the
// run (checkRewrites) when no change of the table comes.
func (r *syncRun) absorbCatalog(ctx context.Context) error { return r.compareCatalog(ctx, false) }

// compareCatalog is checkRewrites, acting on values rewritten when act.
func (r *syncRun) compareCatalog(ctx context.Context, act bool) error {
	var oids []uint32
	for _, t := range r.order {
		if t.streams() && t.shape != nil {
			oids = append(oids, t.src.oid)
		}
	}
	if len(oids) == 0 {
		return nil
	}
	now, err := readNow(ctx, r.conn, oids)
	if err != nil {
		return sourceErr(err)
	}
	pubrels, err := readPubRels(ctx, r.conn, r.cfg.Publication)
	if err != nil {
		return sourceErr(err)
	}
	for _, t := range r.order {
		n, ok := now[t.src.oid]
		if !ok || !t.streams() || t.shape == nil {
			continue
		}
		rw, why := judgeRewrite(t.shape, n)
		if ew, changed := t.shape.enumsChanged(n); ew != "" {
			if rw != valuesRewritten {
				rw, why = valuesRewritten, ew
			}
		} else if changed {
			t.shape.Enums, t.record = n.enums(), true
		}
		switch pr := pubrels[t.src.oid]; {
		case pr == 0 || pr == t.shape.PubRel:
		case t.shape.PubRel == 0:
			t.shape.PubRel, t.record = pr, true
		default:
			rw, why = valuesRewritten, fmt.Sprintf("it left publication %s and was added back (its publication row %d, was %d): "+
				"the changes between are not in the stream", r.cfg.Publication, pr, t.shape.PubRel)
		}
		if rw == valuesRewritten && !act {
			continue
		}
		if rw == valuesRewritten {
			at := slot.LSN(0)
			if r.last != nil {
				at = slot.LSN(r.last.Through)
			}
			return &resyncAt{t: t, why: why, at: at}
		}
		t.absorb(n)
	}
	return r.recordShapes(ctx)
}

// recordShapes records the shape of every table whose shape changed
// (recordShape).
func (r *syncRun) recordShapes(ctx context.Context) error {
	for _, t := range r.order {
		if err := r.recordShape(ctx, t); err != nil {
			return err
		}
	}
	return nil
}

// recordShape writes t's shape as a schema row of the load ledger, when
// it changed since the last one.
func (r *syncRun) recordShape(ctx context.Context, t *syncTable) error {
	if !t.record || t.shape == nil {
		return nil
	}
	ll := r.ledgerOfLoads()
	if err := ll.Ensure(ctx); err != nil {
		return err
	}
	row := target.LoadRow{Slot: r.cfg.Slot, Gen: newGeneration(), Kind: target.LoadSchema, Table: t.name(), Holder: r.holderID(),
		Relid: uint64(t.src.oid), Detail: t.shape.encode()}
	if r.last != nil {
		row.Point = r.last.Through
	}
	if err := ll.Append(ctx, row, r.order[0].run.Lock.Fence()); err != nil {
		return err
	}
	t.record = false
	return r.order[0].run.Lock.Check(ctx)
}

// ledgerOfLoads is the load ledger, beside the sync ledger.
func (r *syncRun) ledgerOfLoads() *target.LoadLedger {
	return r.ch.LoadLedger(r.order[0].m.Target.Database)
}

// clip keeps a ledger detail to a readable length.
func clip(s string) string {
	const most = 1000
	if len(s) <= most {
		return s
	}
	return s[:most] + "…"
}
