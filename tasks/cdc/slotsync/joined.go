package slotsync

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/changesink/changesink/tasks/cdc/slot"
	"github.com/changesink/changesink/tasks/cdc/target"
)

// A table that joins the publication of a slot already loaded and
// streaming (cdc setup with the table in CDC_TABLES or the mapping file
// adds it: ALTER PUBLICATION … ADD TABLE) is loaded alone, from a
// temporary slot's snapshot, the other tables untouched: the load ledger
// records a generation of its own for it (its start row names it), its
// chunks, and a done row at the end. Its rows are versioned at the
// snapshot's point, which is after the ALTER: the stream carries every
// change of the table after that, and a change committed before the point
// is in the snapshot. cdc sync refuses to stream a published table whose
// load has not ended (readFloors), confirming nothing, so the slot stays
// where the load began until it ends; a load cut before it is continued,
// as the slot's own load is (load.go). Then sync streams the table
// with the others, reading its changes before the point as belowLoad does
// and raising those after it above the point (commit).

// loadJoined loads, for a slot loaded and streaming, every table that
// waits for a load of its own: those no load ended for (they joined), those
// whose load was of another table of the same name (dropped and created
// again: another OID), those this setup added to the publication (it
// lacked them, whatever the ledger says: a table out of the publication
// for a while missed its changes), those whose target lost its rows
// (lostRows), those the operator names (Config.Resync) or the mapping now maps
// otherwise (standing), each loaded alone (resync.go). A held table is
// skipped, but for the operator's resync that releases it.
func (r *loader) loadJoined(ctx context.Context) error {
	r.loadLedger = r.ledgerOfLoads()
	if err := r.loadLedger.Ensure(ctx); err != nil {
		return err
	}
	loads, err := r.loadLedger.Tables(ctx, r.cfg.Slot)
	if err != nil {
		return err
	}
	var joined []string
	for _, t := range r.order {
		tl := loads[t.name()]
		t.hold, t.floor = target.LoadRow{}, tl.Point
		if tl.Held {
			t.hold = tl.Hold
		}
		switch {
		case !tl.Done:
			t.resync = fmt.Sprintf("it joined publication %s after the load of slot %s", r.cfg.Publication, r.cfg.Slot)
			joined = append(joined, t.name())
		case otherTable(tl, t):
			t.resync = fmt.Sprintf("table OID %d is not the table its target was loaded from (OID %d): dropped and created again", t.src.oid, tl.Relid)
			joined = append(joined, t.name())
		case r.republished[t.name()]:
			t.resync = fmt.Sprintf("it was out of publication %s, and its changes meanwhile were not streamed", r.cfg.Publication)
			joined = append(joined, t.name())
		default:
			if err := r.lostRows(ctx, t); err != nil {
				return err
			}
		}
	}
	if err := r.recordShapes(ctx); err != nil {
		return err
	}
	if err := r.absorbCatalog(ctx); err != nil {
		return err
	}
	if err := r.operatorResyncs(ctx); err != nil {
		return err
	}
	if err := r.resyncWaiting(ctx); err != nil {
		return err
	}
	for _, n := range joined {
		if slices.ContainsFunc(r.resynced, func(rs resynced) bool { return rs.Table == n }) {
			r.joined = append(r.joined, n)
		}
	}
	for _, t := range r.order {
		if t.hold.Gen != "" {
			r.log.Warn(fmt.Sprintf("cdc: table %s is held since %s (%s): not loaded; an operator's resync (%s=%s) releases it",
				t.name(), slot.LSN(t.hold.Point), t.hold.Detail, EnvResync, t.name()))
		}
	}
	return nil
}

// lostRows sets t waiting for a resync when its target lost the rows its
// load wrote: it was made now (dropped, and setup made it again empty),
// or it holds no row while the source table holds some (emptied by hand).
func (r *loader) lostRows(ctx context.Context, t *syncTable) error {
	if t.created {
		t.resync = "its target was missing, and setup made it again empty"
		return nil
	}
	high, err := t.run.Tbl.HighestVersion(ctx)
	if err != nil || high > 0 {
		return err
	}
	var some bool
	if err := r.conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+pgx.Identifier{t.src.schema, t.src.name}.Sanitize()+`)`).Scan(&some); err != nil {
		return sourceErr(fmt.Errorf("table %s: read whether it holds a row: %w", t.name(), err))
	}
	if some {
		t.resync = "its target holds no row, and the source table does"
	}
	return nil
}

// resyncedOnly are the run's resynced tables but the joined ones (named
// apart).
func (r *syncRun) resyncedOnly(joined []string) []resynced {
	var out []resynced
	for _, rs := range r.resynced {
		if !slices.Contains(joined, rs.Table) {
			out = append(out, rs)
		}
	}
	return out
}

// heldNames are the tables held when the run ended.
func (r *syncRun) heldNames() []string {
	var out []string
	for _, t := range r.order {
		if t.hold.Gen != "" {
			out = append(out, t.name())
		}
	}
	return out
}

// resyncedOutputs are resynced tables as outputs: each table's why,
// point and rows.
func resyncedOutputs(rs []resynced) map[string]any {
	out := map[string]any{}
	for _, t := range rs {
		out[t.Table] = map[string]any{"why": t.Why, "point": t.Point.String(), "rows": t.Rows}
	}
	return out
}

// prepareJoined decides the load of the joined tables: the generation an
// earlier run began for exactly these tables, continued when the slot has
// not moved since it began (nothing streamed: sync refuses until it ends),
// else a new one; either from a new temporary slot's snapshot.
func (r *loader) prepareJoined(ctx context.Context, joined []*syncTable, loads map[string]target.TableLoad, fresh bool) (*loadRun, error) {
	h, err := slot.ReadHealth(ctx, r.conn.PgConn(), r.cfg.Slot)
	if err != nil {
		return nil, sourceErr(err)
	}
	l := &loadRun{from: uint64(h.Confirmed)}
	names := make([]string, len(joined))
	for i, t := range joined {
		names[i] = t.name()
	}
	slices.Sort(names)
	gen := loads[names[0]].Gen
	for _, n := range names {
		if loads[n].Gen != gen {
			gen = "" // not one generation's tables
		}
	}
	if gen != "" && !fresh {
		rows, err := r.loadLedger.Latest(ctx, r.cfg.Slot, names[0])
		if err != nil {
			return nil, err
		}
		var started []string
		same := true
		for _, row := range rows {
			switch row.Kind {
			case target.LoadStart:
				started = append(started, row.Table)
				same = same && row.Gen == gen && row.StreamFrom == l.from && row.SystemID == r.systemID && row.SourceDB == r.source
			case target.LoadChunk:
				l.done = append(l.done, row)
			}
		}
		slices.Sort(started)
		switch {
		case same && slices.Equal(started, names):
			l.gen, l.continued = gen, true
		case len(started) == 0:
			l.done = nil
		default:
			l.done = nil
			r.log.Warn(fmt.Sprintf("cdc: the load of %s that joined publication %s (generation %s) began for %s at %s; the slot stands at %s: "+
				"loading them again", strings.Join(names, ", "), r.cfg.Publication, gen, strings.Join(started, ", "), slot.LSN(rows[0].StreamFrom), h.Confirmed))
		}
	}
	if !l.continued {
		l.done = nil
		l.gen = newGeneration()
		for _, n := range names {
			if err := r.appendLoad(ctx, target.LoadRow{Slot: r.cfg.Slot, Gen: l.gen, Kind: target.LoadStart, Table: n, StreamFrom: l.from,
				SystemID: r.systemID, SourceDB: r.source, Holder: r.holderID()}); err != nil {
				return nil, err
			}
		}
	}
	snap, err := r.exportTemporary(ctx)
	if err != nil {
		return nil, err
	}
	l.fromTemporary(snap)
	verb := "loading"
	if l.continued {
		verb = fmt.Sprintf("continuing the load (generation %s, %d chunks done) of", l.gen, len(l.done))
	}
	why := joined[0].resync
	if strings.HasPrefix(why, "it joined publication ") {
		why = "which joined publication " + strings.TrimPrefix(why, "it joined publication ")
	} else {
		why = "again (" + why + ")"
	}
	r.log.Info(fmt.Sprintf("cdc: %s %s, %s, from a new snapshot at %s; the other tables are not loaded again",
		verb, strings.Join(names, ", "), why, snap.ConsistentPoint))
	return l, nil
}

// otherTable reports that the load tl was of another table than t's
// source (an OID recorded, and not t's).
func otherTable(tl target.TableLoad, t *syncTable) bool {
	return tl.Done && tl.Relid != 0 && tl.Relid != uint64(t.src.oid)
}
