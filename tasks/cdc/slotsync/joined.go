package slotsync

import (
	"context"
	"fmt"
	"slices"
	"strings"

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

// loadJoined loads the tables of the run that joined the publication:
// those no load ended for, those whose load was of another table of the
// same name (dropped and created again: another OID), and those this
// setup added to the publication (it lacked them, whatever the ledger
// says: a table out of the publication for a while missed its changes).
// The last two are loaded afresh; their targets' rows of before are
// deleted where the new load has none (deleteGone).
func (r *loader) loadJoined(ctx context.Context) error {
	r.loadLedger = r.ch.LoadLedger(r.order[0].m.Target.Database)
	if err := r.loadLedger.Ensure(ctx); err != nil {
		return err
	}
	loads, err := r.loadLedger.Tables(ctx, r.cfg.Slot)
	if err != nil {
		return err
	}
	var joined []*syncTable
	fresh := false // a load of some of them cannot be continued
	for _, t := range r.order {
		tl := loads[t.name()]
		other := otherTable(tl, t)
		if !tl.Done || other || r.republished[t.name()] {
			joined = append(joined, t)
			fresh = fresh || other || r.republished[t.name()]
		}
		if other {
			r.log.Warn(fmt.Sprintf("cdc: table %s (OID %d) is not the table its target was loaded from (OID %d): dropped and created again; loading it afresh",
				t.name(), t.src.oid, tl.Relid))
		}
	}
	if len(joined) == 0 {
		return nil
	}
	l, err := r.prepareJoined(ctx, joined, loads, fresh)
	if err != nil {
		return err
	}
	defer l.release()
	if err := r.refuseNewer(ctx, joined, l.point); err != nil {
		return err
	}
	if err := r.loadTables(ctx, l, joined); err != nil {
		return err
	}
	if err := r.deleteGone(ctx, joined, l.goneBelow(true)); err != nil {
		return err
	}
	for _, t := range joined {
		if err := r.appendLoad(ctx, target.LoadRow{Slot: r.cfg.Slot, Gen: l.gen, Kind: target.LoadDone, Table: t.name(),
			Point: l.point, Holder: r.holderID(), Relid: uint64(t.src.oid)}); err != nil {
			return err
		}
		r.joined = append(r.joined, t.name())
	}
	r.res.Changes, r.continued = r.loaded.Rows, l.continued
	return nil
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
	r.log.Info(fmt.Sprintf("cdc: %s %s, which joined publication %s after the load of slot %s, from a new snapshot at %s; "+
		"the other tables are not loaded again", verb, strings.Join(names, ", "), r.cfg.Publication, r.cfg.Slot, snap.ConsistentPoint))
	return l, nil
}

// otherTable reports that the load tl was of another table than t's
// source (an OID recorded, and not t's).
func otherTable(tl target.TableLoad, t *syncTable) bool {
	return tl.Done && tl.Relid != 0 && tl.Relid != uint64(t.src.oid)
}
