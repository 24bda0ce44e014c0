package slotsync

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
	"github.com/changesink/changesink/tasks/cdc/applier"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/initload"
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
func SetupSync(ctx context.Context, cfg Config, env Env) (_ *SetupResult, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &syncRun{cfg: cfg, env: env, log: env.log(), start: time.Now(), stop: applier.Stop{Cmd: "cdc setup", Step: applier.StepOpen}}
	defer func() { err = r.stop.Wrap(ctx, err) }()
	if err := r.checkBeforeSetup(ctx); err != nil {
		return nil, err
	}
	created, err := r.ensureSlot(ctx)
	if err != nil {
		return nil, err
	}
	defer created.release()
	defer r.closeSource()
	if err := r.setupTargets(ctx, created.snap != nil); err != nil {
		return nil, r.dropCreated(ctx, created, err)
	}
	defer r.ch.Close()
	if err := r.lockTargets(ctx); err != nil {
		return nil, r.dropCreated(ctx, created, err)
	}
	defer r.releaseTargets(ctx)
	ld := &loader{syncRun: r}
	if err := ld.load(ctx, created); err != nil {
		return nil, err
	}
	return r.setupResult(created, ld), nil
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
	r.republished = map[string]bool{}
	for _, t := range res.TablesAdded {
		r.republished[t.String()] = true
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
// as Setup does (table, live view, ledger; a target that stands mapped as
// it stands: mapTargets), then the sync ledger. newSlot: the slot was
// made now (a target that stands is not one its load made).
func (r *syncRun) setupTargets(ctx context.Context, newSlot bool) error {
	src, err := readCatalog(ctx, r.conn, r.cfg.Publication)
	if err != nil {
		return sourceErr(err)
	}
	if r.ch, err = target.Connect(ctx, withConns(r.cfg.ClickHouse, len(src)+r.cfg.LoadWorkers), nil); err != nil {
		return err
	}
	if err := r.mapTargets(ctx, src, true, newSlot); err != nil {
		return err
	}
	return r.ledger.Ensure(ctx)
}

// SetupResult reports what SetupSync ensured and loaded.
type SetupResult struct {
	Slot, Publication string
	// Created: the slot was made now, and the tables loaded from its
	// snapshot at ConsistentPoint.
	Created         bool
	ConsistentPoint slot.LSN
	Tables          []TableResult
	Loaded          int64
	// Load is what the initial load copied (zero when nothing was loaded);
	// Continued: it continued a load an earlier run began.
	Load      initload.Stats
	Continued bool
	// Joined are the tables that joined the publication after the slot's
	// load, loaded alone now; Resynced the tables loaded again (each with
	// why), Held those held (a hold only an operator's resync releases).
	Joined   []string
	Resynced []resynced
	Held     []string
}

// setupResult is what the setup ensured, and what its load ld loaded.
func (r *syncRun) setupResult(c created, ld *loader) *SetupResult {
	res := &SetupResult{Slot: r.cfg.Slot, Publication: r.cfg.Publication, Created: c.snap != nil, ConsistentPoint: c.at, Loaded: r.res.Changes,
		Load: ld.loaded, Continued: ld.continued, Joined: ld.joined, Resynced: r.resyncedOnly(ld.joined), Held: r.heldNames()}
	for _, t := range r.order {
		res.Tables = append(res.Tables, TableResult{Source: t.name(), Target: mapping.Qualified(t.m.Target.Database, t.m.Target.Table), Counts: t.res})
	}
	return res
}

// Outputs implements kestra.Result.
func (r *SetupResult) Outputs() map[string]any {
	tables := map[string]any{}
	for _, t := range r.Tables {
		tables[t.Source] = map[string]any{"target": t.Target, "loaded": t.Events}
	}
	return map[string]any{"slot": r.Slot, "publication": r.Publication, "created": r.Created,
		"consistent_point": r.ConsistentPoint.String(), "loaded": r.Loaded, "tables": tables, "continued": r.Continued,
		"joined": append([]string{}, r.Joined...), "resynced": resyncedOutputs(r.Resynced), "held": append([]string{}, r.Held...),
		"load": map[string]any{"rows": r.Load.Rows, "bytes": r.Load.Bytes, "chunks": r.Load.Chunks, "workers": r.Load.Workers,
			"seconds": r.Load.Duration.Seconds(), "rows_per_second": r.Load.RowsPerSecond}}
}

// Metrics implements kestra.Result.
func (r *SetupResult) Metrics() []kestra.Metric {
	tags := map[string]string{"slot": r.Slot}
	return []kestra.Metric{kestra.Counter("loaded", float64(r.Loaded), tags), kestra.Counter("load_bytes", float64(r.Load.Bytes), tags),
		kestra.Counter("load_chunks", float64(r.Load.Chunks), tags), kestra.Timer("load_duration", r.Load.Duration, tags)}
}

// Summary is the run's one-line log.
func (r *SetupResult) Summary() string {
	if len(r.Resynced) > 0 {
		names := make([]string, len(r.Resynced))
		for i, t := range r.Resynced {
			names[i] = t.Table
		}
		return fmt.Sprintf("Slot %s: %s loaded again from a new snapshot (%d rows); the other tables were not loaded again.",
			r.Slot, strings.Join(names, ", "), r.Loaded)
	}
	if len(r.Joined) > 0 {
		return fmt.Sprintf("Slot %s: %d rows of %s, which joined publication %s, loaded and counted; the other tables were not loaded again.",
			r.Slot, r.Loaded, strings.Join(r.Joined, ", "), r.Publication)
	}
	if r.Continued {
		return fmt.Sprintf("Slot %s: its load continued; %d more rows of %d tables loaded and counted.", r.Slot, r.Loaded, len(r.Tables))
	}
	if !r.Created {
		return fmt.Sprintf("Slot %s and publication %s are in place, with the targets of %d tables.", r.Slot, r.Publication, len(r.Tables))
	}
	return fmt.Sprintf("Slot %s created at %s; %d rows of %d tables loaded from its snapshot and counted.",
		r.Slot, r.ConsistentPoint, r.Loaded, len(r.Tables))
}
