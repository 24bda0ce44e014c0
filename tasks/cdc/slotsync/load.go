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
	"github.com/changesink/changesink/tasks/cdc/applier"
	"github.com/changesink/changesink/tasks/cdc/initload"
	"github.com/changesink/changesink/tasks/cdc/pgvalue"
	"github.com/changesink/changesink/tasks/cdc/slot"
	"github.com/changesink/changesink/tasks/cdc/target"
)

// loader is cdc setup's initial load (SetupSync): of every table from a
// new slot's snapshot, of a load an earlier run began and did not end, or
// of the tables that joined the publication since (joined.go), recorded in
// the load ledger chunk by chunk. The run's state it shares (the source,
// the targets and their locks, the sync ledger) is the syncRun's.
type loader struct {
	*syncRun
	// loadLedger is the load ledger; loaded what the load copied, joined
	// the tables it loaded that joined the publication after the slot's
	// load; continued: it continued a load an earlier run began.
	loadLedger *target.LoadLedger
	loaded     initload.Stats
	joined     []string
	continued  bool
}

// load copies every table from the new slot's snapshot into its target,
// then records the slot's consistent point in the sync ledger. A slot that
// was there is loaded already (the sync ledger has it: only the tables
// that joined the publication since are loaded, joined.go), or its
// load was cut and is continued (positions.go has the points of each).
func (r *loader) load(ctx context.Context, c created) error {
	last, err := r.ledger.Last(ctx, r.cfg.Slot)
	if err != nil {
		return err
	}
	r.last = last
	if c.snap == nil && last != nil {
		return r.loadJoined(ctx)
	}
	l, err := r.prepareLoad(ctx, c)
	if err != nil {
		return err
	}
	defer l.release()
	plans, inPlace, err := r.reshape(ctx, l)
	if err != nil {
		return err
	}
	if err := r.refuseNewer(ctx, inPlace, l.point); err != nil {
		return r.dropCreated(ctx, c, err)
	}
	if err := r.loadTables(ctx, l, r.order); err != nil {
		return err
	}
	if err := r.deleteGone(ctx, inPlace, l.goneBelow(false)); err != nil {
		return err
	}
	for i, t := range r.order {
		if err := r.swapIn(ctx, t, plans[i]); err != nil {
			return err
		}
	}
	r.res.Changes, r.continued = r.loaded.Rows, l.continued
	r.stop.Step = applier.StepLedger
	e := target.SyncEntry{Slot: r.cfg.Slot, Holder: r.holderID(), SystemID: r.systemID, SourceDB: r.source, Through: l.from,
		Changes: uint64(r.res.Changes), Tables: "{}"}
	if err := r.appendLedger(ctx, &e); err != nil {
		return err
	}
	r.last = &e
	// What each target follows of its source from the load on (shape.go).
	return r.recordShapes(ctx)
}

// prepareLoad decides the load: from the new slot's snapshot, a new
// generation; for a slot that was there and never loaded to the end, the
// load ledger's generation continued (or restarted) from a temporary
// slot's snapshot (a slot the load ledger has no load of is loaded whole
// from it too: a setup killed between the slot and its load's first row).
func (r *loader) prepareLoad(ctx context.Context, c created) (*loadRun, error) {
	r.loadLedger = r.ch.LoadLedger(r.order[0].m.Target.Database)
	if err := r.loadLedger.Ensure(ctx); err != nil {
		return nil, err
	}
	if c.snap != nil {
		l := slotLoad(c)
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
	l.fromTemporary(snap)
	if l.continued {
		r.log.Info(fmt.Sprintf("cdc: continuing the load of slot %s (generation %s, %d chunks done): the rest from a new snapshot at %s; the stream starts at %s",
			r.cfg.Slot, l.gen, len(l.done), snap.ConsistentPoint, at))
	}
	return l, nil
}

// startGeneration records a new generation of the load in the load ledger.
func (r *loader) startGeneration(ctx context.Context, l *loadRun) error {
	l.gen = newGeneration()
	return r.appendLoad(ctx, target.LoadRow{Slot: r.cfg.Slot, Gen: l.gen, Kind: target.LoadStart, StreamFrom: l.from,
		SystemID: r.systemID, SourceDB: r.source, Holder: r.holderID()})
}

// newGeneration names a new generation of a load: they sort by when they
// began.
func newGeneration() string { return fmt.Sprintf("%020d", time.Now().UnixNano()) }

// appendLoad appends a row to the load ledger, fenced by the first
// target's lock (as the sync ledger's rows), then checks that lock.
func (r *loader) appendLoad(ctx context.Context, row target.LoadRow) error {
	lk := r.order[0].run.Lock
	if err := r.loadLedger.Append(ctx, row, lk.Fence()); err != nil {
		return err
	}
	return lk.Check(ctx)
}

// slotsWait is how long a load waits for a free replication slot for its
// temporary one: the run killed before it may still hold its own until
// the server sees its connection gone.
const slotsWait = 30 * time.Second

// exportTemporary creates the temporary slot of a continued load and
// returns its snapshot, waiting up to slotsWait for a free slot.
func (r *loader) exportTemporary(ctx context.Context) (*slot.Snapshot, error) {
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

// reshape plans the slot's load of every table: in place, but for a table
// whose target has another shape than the source has now (a load
// continued after its table changed: a rewrite, a column renamed or
// dropped during the load), which is loaded beside its target and swapped
// in (resync.go), its shape then recorded anew.
func (r *loader) reshape(ctx context.Context, l *loadRun) ([]resyncPlan, []*syncTable, error) {
	src, err := readCatalog(ctx, r.conn, r.cfg.Publication)
	if err != nil {
		return nil, nil, sourceErr(err)
	}
	now, err := readNow(ctx, r.conn, oidsOf(src))
	if err != nil {
		return nil, nil, sourceErr(err)
	}
	plans := make([]resyncPlan, len(r.order))
	for i, t := range r.order {
		if plans[i], err = r.planResync(ctx, t, src, false); err != nil {
			return nil, nil, err
		}
		if plans[i].rebuild {
			plans[i].why = "it changed during the load"
			t.shape, t.record = shapeOf(plans[i].src, plans[i].m, now[t.src.oid]), true
		}
	}
	inPlace, err := r.prepareTargets(ctx, r.order, plans, l)
	return plans, inPlace, err
}
