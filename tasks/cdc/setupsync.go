package cdc

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/changesink/changesink/internal/kestra"
	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/pgvalue"
	"github.com/changesink/changesink/tasks/cdc/slot"
	"github.com/changesink/changesink/tasks/cdc/target"
)

// SetupSync prepares cdc sync: the publication and the slot (created when
// missing, checked when present, never dropped), every published table's
// target (as Setup makes one) and, when it creates the slot, the initial
// load: every table copied from the slot's exported snapshot into its
// target, versioned at the slot's consistent point, so that the stream
// that follows is newer than every loaded row and nothing between is lost.
// The consistent point is then the sync ledger's first row of the slot. It
// is idempotent: a slot already set up is checked, not loaded again.
func SetupSync(ctx context.Context, cfg SyncConfig, env Env) (_ *SyncSetupResult, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &syncRun{cfg: cfg, env: env, log: env.log(), start: time.Now(), stop: stopState{cmd: "cdc setup", step: stepOpen}}
	defer func() { err = r.stop.wrap(ctx, err) }()
	created, err := r.ensureSlot(ctx)
	if err != nil {
		return nil, err
	}
	defer created.release()
	defer r.closeSource()
	if err := r.setupTargets(ctx); err != nil {
		return nil, r.dropCreated(ctx, created, err)
	}
	defer r.ch.Close()
	if err := r.lockTargets(ctx); err != nil {
		return nil, r.dropCreated(ctx, created, err)
	}
	defer r.releaseTargets(ctx)
	if err := r.load(ctx, created); err != nil {
		return nil, err
	}
	return r.setupResult(created), nil
}

// dropCreated drops the slot this run created, for a setup that failed
// before its load began (cause): no target holds a row of the slot's
// snapshot, and a slot left without its sync ledger row would make the
// next setup refuse, its snapshot gone. It returns cause; a slot it could
// not drop is logged, for the person who reads cause.
func (r *syncRun) dropCreated(ctx context.Context, c created, cause error) error {
	if c.snap == nil || r.conn == nil {
		return cause
	}
	c.release()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*activeWait)
	defer cancel()
	var err error
	// The walsender of the snapshot's connection ends a moment after the
	// connection: until then the slot is active (55006).
	for active := true; active; {
		_, err = r.conn.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, r.cfg.Slot)
		var pe *pgconn.PgError
		active = errors.As(err, &pe) && pe.Code == "55006" && ctx.Err() == nil
		if active {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if err != nil {
		r.log.Warn(fmt.Sprintf("cdc: setup failed and could not drop the slot %s it created: %v; drop it before the next setup: SELECT pg_drop_replication_slot('%s')",
			r.cfg.Slot, err, r.cfg.Slot))
		return cause
	}
	r.log.Info(fmt.Sprintf("cdc: setup failed before its load; dropped the slot %s it created, so that the next setup starts clean", r.cfg.Slot))
	return cause
}

// created is the slot Ensure made, with its snapshot; zero when the slot
// was there already.
type created struct {
	snap *slot.Snapshot
	at   slot.LSN
}

func (c created) release() {
	if c.snap != nil {
		c.snap.Release()
	}
}

// ensureSlot connects to the source for the catalog and the load, under
// the settings the values are read with, then makes sure of the
// publication and the slot (slot.Ensure). It connects first, as Sync does,
// so that a login the source refuses is a configuration error here too.
func (r *syncRun) ensureSlot(ctx context.Context) (created, error) {
	tables, err := r.publishedTables()
	if err != nil {
		return created{}, err
	}
	conn := r.cfg.source.Copy()
	maps.Copy(conn.RuntimeParams, pgvalue.Settings())
	if r.conn, err = pgx.ConnectConfig(ctx, conn); err != nil {
		return created{}, sourceErr(fmt.Errorf("connect to the source: %w", err))
	}
	if r.systemID, r.source, err = systemIdentity(ctx, r.conn); err != nil {
		r.closeSource()
		return created{}, sourceErr(err)
	}
	pg := r.cfg.source.Config.Copy()
	if pg.RuntimeParams == nil {
		pg.RuntimeParams = map[string]string{}
	}
	maps.Copy(pg.RuntimeParams, pgvalue.Settings())
	res, err := slot.Ensure(ctx, pg, slot.Setup{Slot: r.cfg.Slot, Publication: r.cfg.Publication, Tables: tables,
		ExportSnapshot: true, ActiveWait: activeWait})
	if err != nil {
		r.closeSource()
		return created{}, err
	}
	if !res.SlotCreated {
		return created{}, nil
	}
	return created{snap: res.Snapshot, at: res.ConsistentPoint}, nil
}

// publishedTables are the tables the publication must publish: the
// settings' list, else the mapping file's.
func (r *syncRun) publishedTables() ([]slot.Table, error) {
	names := r.cfg.Tables
	if len(names) == 0 {
		names = r.cfg.Mappings.Tables()
	}
	if len(names) == 0 {
		return nil, outcome.Config.Mark(fmt.Errorf("%w: no table to publish: name them in %s (schema.table, comma-separated) or in the mapping file",
			change.ErrConfig, EnvTables))
	}
	var out []slot.Table
	for _, n := range names {
		t, err := slot.ParseTable(strings.TrimSpace(n))
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// setupTargets maps every published table to its target and sets each up
// as Setup does (table, live view, ledger), then the sync ledger.
func (r *syncRun) setupTargets(ctx context.Context) error {
	src, err := readCatalog(ctx, r.conn, r.cfg.Publication)
	if err != nil {
		return sourceErr(err)
	}
	if r.ch, err = target.Connect(ctx, withConns(r.cfg.ClickHouse, len(src)), nil); err != nil {
		return err
	}
	ms, err := mappings(r.cfg.Mappings, r.source, src, r.ch.Caps)
	if err != nil {
		return err
	}
	for _, m := range ms {
		srv := r.ch.With(m)
		if err := srv.CheckSupported(); err != nil {
			return err
		}
		if _, err := srv.Setup(ctx); err != nil {
			return fmt.Errorf("table %s.%s: %w", m.Source.Schema, m.Source.Table, err)
		}
	}
	if err := r.openTargetsOf(ctx, src, ms); err != nil {
		return err
	}
	return r.ledger.Ensure(ctx)
}

// load copies every table from the new slot's snapshot into its target,
// then records the slot's consistent point in the sync ledger. For a slot
// that was there, it checks the ledger has it: a slot nothing loaded from
// cannot be streamed (its snapshot is gone).
func (r *syncRun) load(ctx context.Context, c created) error {
	last, err := r.ledger.Last(ctx, r.cfg.Slot)
	if err != nil {
		return err
	}
	r.last = last
	if c.snap == nil {
		if last == nil {
			return outcome.Refused.Mark(fmt.Errorf("%w: slot %s exists, but the sync ledger %s has no row of it: its snapshot is gone",
				change.ErrNotLoaded, r.cfg.Slot, r.ledgerName()))
		}
		return nil
	}
	for _, t := range r.order {
		if err := r.loadTable(ctx, c, t); err != nil {
			return err
		}
	}
	r.stop.step = stepLedger
	e := target.SyncEntry{Slot: r.cfg.Slot, Holder: r.holderID(), SystemID: r.systemID, SourceDB: r.source, Through: uint64(c.at),
		Changes: uint64(r.res.Changes), Tables: "{}"}
	if err := r.appendLedger(ctx, &e); err != nil {
		return err
	}
	r.last = &e
	return nil
}

// loadChunk is how many rows of a table the load applies at a time: a
// chunk's rows are in memory.
const loadChunk = 100_000

// loadTable copies one table from the snapshot, chunk by chunk, each
// applied through the steps of Apply (so a target that already holds rows,
// the trigger flow's, keeps its newer ones) and read back.
func (r *syncRun) loadTable(ctx context.Context, c created, t *syncTable) error {
	tx, err := c.snap.Begin(ctx, r.conn)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	cols := make([]string, len(t.src.cols))
	rel := &slot.Relation{ID: t.src.oid, Namespace: t.src.schema, Name: t.src.name, Identity: t.src.identity}
	for i, col := range t.src.cols {
		cols[i] = pgx.Identifier{col.Name}.Sanitize()
		rel.Columns = append(rel.Columns, slot.Column{Name: col.Name, TypeOID: col.TypeOID, TypeMod: col.TypeMod, Key: col.Key})
	}
	if err := t.decoders(rel); err != nil {
		return err
	}
	r.stop.step = "loading " + t.name()
	// The simple protocol returns each value as its type's output function
	// prints it, as pgoutput sends it (a cast to text would not: a boolean
	// prints true, a char(n) loses its padding).
	rows, err := tx.Query(ctx, "SELECT "+strings.Join(cols, ", ")+" FROM ONLY "+pgx.Identifier{t.src.schema, t.src.name}.Sanitize(),
		pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		return sourceErr(fmt.Errorf("table %s: read it under snapshot %s: %w", t.name(), c.snap.Name, err))
	}
	defer rows.Close()
	tup := slot.Tuple{Values: make([]slot.Value, len(cols))}
	var f flush
	for rows.Next() {
		for i, raw := range rows.RawValues() {
			tup.Values[i] = slot.Value{Kind: slot.ValueText, Data: raw}
			if raw == nil {
				tup.Values[i].Kind = slot.ValueNull
			}
		}
		if err := t.read(tup, change.OpRead, false, uint64(c.at)); err != nil {
			return err
		}
		if err := f.addRead(t); err != nil {
			return err
		}
		if t.rows >= loadChunk {
			if err := t.apply(ctx); err != nil {
				return err
			}
		}
	}
	if err := rows.Err(); err != nil {
		return sourceErr(fmt.Errorf("table %s: read it under snapshot %s: %w", t.name(), c.snap.Name, err))
	}
	if t.rows > 0 {
		if err := t.apply(ctx); err != nil {
			return err
		}
	}
	r.res.Changes += f.changes
	r.log.Info(fmt.Sprintf("cdc: loaded %s into %s: %d rows, read back", t.name(), mapping.Qualified(t.m.Target.Database, t.m.Target.Table), f.changes))
	return nil
}

// addRead adds t's open row, a snapshot row, to its batch: a READ at the
// snapshot's point, below every change the stream brings.
func (f *flush) addRead(t *syncTable) error {
	r := t.open[0]
	t.open = t.open[:0]
	r.Meta.Sum, f.sumBuf = change.EventSum(f.sumBuf, &r)
	if err := t.batch.Add(r); err != nil {
		return outcome.Refused.Mark(fmt.Errorf("table %s: %w", t.name(), err))
	}
	t.rows++
	f.changes++
	return nil
}

// SyncSetupResult reports what SetupSync ensured and loaded.
type SyncSetupResult struct {
	Slot, Publication string
	// Created: the slot was made now, and the tables loaded from its
	// snapshot at ConsistentPoint.
	Created         bool
	ConsistentPoint slot.LSN
	Tables          []SyncTable
	Loaded          int64
}

func (r *syncRun) setupResult(c created) *SyncSetupResult {
	res := &SyncSetupResult{Slot: r.cfg.Slot, Publication: r.cfg.Publication, Created: c.snap != nil, ConsistentPoint: c.at, Loaded: r.res.Changes}
	for _, t := range r.order {
		res.Tables = append(res.Tables, SyncTable{Source: t.name(), Target: mapping.Qualified(t.m.Target.Database, t.m.Target.Table), Result: t.res})
	}
	return res
}

// Outputs implements kestra.Result.
func (r *SyncSetupResult) Outputs() map[string]any {
	tables := map[string]any{}
	for _, t := range r.Tables {
		tables[t.Source] = map[string]any{"target": t.Target, "loaded": t.Events}
	}
	return map[string]any{"slot": r.Slot, "publication": r.Publication, "created": r.Created,
		"consistent_point": r.ConsistentPoint.String(), "loaded": r.Loaded, "tables": tables}
}

// Metrics implements kestra.Result.
func (r *SyncSetupResult) Metrics() []kestra.Metric {
	return []kestra.Metric{kestra.Counter("loaded", float64(r.Loaded), map[string]string{"slot": r.Slot})}
}

// Summary is the run's one-line log.
func (r *SyncSetupResult) Summary() string {
	if !r.Created {
		return fmt.Sprintf("Slot %s and publication %s are in place, with the targets of %d tables.", r.Slot, r.Publication, len(r.Tables))
	}
	return fmt.Sprintf("Slot %s created at %s; %d rows of %d tables loaded from its snapshot and read back.",
		r.Slot, r.ConsistentPoint, r.Loaded, len(r.Tables))
}
