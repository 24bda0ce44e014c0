package slotsync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/applier"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/internal/testhook"
	"github.com/changesink/changesink/tasks/cdc/slot"
	"github.com/changesink/changesink/tasks/cdc/target"
)

// Sync streams the replication slot into the targets: it opens the slot
// and the catalog, maps every published table to its target and checks
// it, takes each target's lock, checks the slot's position against the
// sync ledger, then reads whole committed transactions and applies them
// flush by flush (each table's rows inserted and read back, the flush
// recorded in the sync ledger, and only then the slot confirmed) until the
// slot is caught up or a budget ends. Refusals name the table, key, column
// and LSN; every failure leaves the slot where the last verified flush
// confirmed it, so a re-run converges.
func Sync(ctx context.Context, cfg Config, env Env) (_ *Result, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &syncRun{cfg: cfg, env: env, log: env.log(), start: time.Now(), stop: applier.Stop{Cmd: "cdc sync", Step: applier.StepOpen}}
	defer func() { err = r.stop.Wrap(ctx, err) }()
	if err := r.openSource(ctx); err != nil {
		return nil, err
	}
	defer r.closeSource()
	if err := r.openTargets(ctx); err != nil {
		return nil, err
	}
	defer r.ch.Close()
	if err := r.lockTargets(ctx); err != nil {
		return nil, err
	}
	defer r.releaseTargets(ctx)
	defer func() { err = r.lockFirst(ctx, err) }()
	if err := r.checkPosition(ctx); err != nil {
		return nil, err
	}
	if err := r.prepareStream(ctx); err != nil {
		return nil, err
	}
	if err := r.markEnd(ctx); err != nil {
		return nil, err
	}
	if err := r.streamAll(ctx); err != nil {
		return nil, err
	}
	if err := r.endStream(ctx); err != nil {
		return nil, err
	}
	res := r.result(ctx)
	return res, r.heldErr()
}

// streamAll reads and applies flush after flush until the run is caught
// up or a budget ends; a table that needs a resync at a change is loaded
// again there (restartAt), and the stream read on from it. A table that
// joined the publication meanwhile ends the run there (endAtJoin).
func (r *syncRun) streamAll(ctx context.Context) error {
	for !r.done {
		err := r.readFlush(ctx)
		if err == nil {
			err = r.applyFlush(ctx)
		}
		var ra *resyncAt
		switch {
		case errors.As(err, &ra):
			if err := r.restartAt(ctx, ra); err != nil {
				return err
			}
		case err != nil:
			return r.endAtJoin(ctx, err)
		}
	}
	return nil
}

// prepareStream makes ready what the stream needs before it is read:
// the shapes of targets an earlier changesink loaded recorded, the
// catalog's harmless changes taken in (absorbCatalog), an operator's resyncs
// (Config.Resync) recorded, and every table that waits for a resync
// loaded again (the stream closed meanwhile).
func (r *syncRun) prepareStream(ctx context.Context) error {
	if err := r.recordShapes(ctx); err != nil {
		return err
	}
	if err := r.absorbCatalog(ctx); err != nil {
		return err
	}
	if err := r.operatorResyncs(ctx); err != nil {
		return err
	}
	if !slices.ContainsFunc(r.order, func(t *syncTable) bool { return t.resync != "" && t.hold.Gen == "" }) {
		return nil
	}
	r.closeStream()
	if err := r.resyncWaiting(ctx); err != nil {
		return err
	}
	return r.openStream(ctx)
}

// endStream ends a run that read the stream to its end: the slot moved
// on a quiet publication (confirmIdle), then the catalog compared once
// more, and a table rewritten meanwhile where the stream could not place
// it loaded again now.
func (r *syncRun) endStream(ctx context.Context) error {
	if r.stream != nil {
		if err := r.confirmIdle(ctx); err != nil {
			return err
		}
	}
	// Each round resyncs one table at most, then compares again.
	for range len(r.order) + 1 {
		err := r.checkRewrites(ctx)
		if err == nil && r.why == whyCaughtUp && !r.open {
			err = r.takeInCatalog(ctx)
		}
		var ra *resyncAt
		if !errors.As(err, &ra) {
			return err
		}
		if err := r.requestResync(ctx, ra.t, ra.why); err != nil {
			return err
		}
		r.log.Warn(fmt.Sprintf("cdc: %v; loading the table again from a new snapshot", ra))
		r.closeStream()
		if err := r.resyncWaiting(ctx); err != nil {
			return err
		}
	}
	return nil
}

// operatorResyncs records the resyncs Config.Resync asks for: each a
// published table of the run (a held one too: the resync releases it).
func (r *syncRun) operatorResyncs(ctx context.Context) error {
	for _, name := range r.cfg.Resync {
		i := slices.IndexFunc(r.order, func(t *syncTable) bool { return t.name() == name })
		if i < 0 {
			return outcome.Config.Mark(fmt.Errorf("%w: %s names %s, which publication %s does not publish", change.ErrConfig, EnvResync, name,
				r.cfg.Publication))
		}
		t := r.order[i]
		if err := r.requestResync(ctx, t, "an operator's resync ("+EnvResync+")"); err != nil {
			return err
		}
		t.hold = target.LoadRow{}
	}
	return nil
}

// Env is what a run takes from where it runs rather than from its
// settings.
type Env struct {
	// Log receives progress and warnings; nil discards them.
	Log *slog.Logger
	// Hooks stop a run at a chosen step or shrink the load's sizes: set by
	// the tests of this package and of the facade (tasks/cdc, which passes
	// its Env's own), zero in every real run. Its type is internal to
	// tasks/cdc: nothing outside can set it.
	Hooks testhook.Hooks
}

// log is e.Log, or a logger that discards.
func (e Env) log() *slog.Logger {
	if e.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return e.Log
}

// syncRun is one run of Sync or SetupSync: its settings, its connections,
// its targets, the flush it gathers, and what the steps report.
type syncRun struct {
	cfg   Config
	env   Env
	log   *slog.Logger
	start time.Time
	stop  applier.Stop

	// The source: the stream of the slot, and a plain connection for the
	// catalog and the slot's health; its identity, for the sync ledger.
	stream           *slot.Stream
	conn             *pgx.Conn
	systemID, source string
	// startedAt is where the slot stood when the run began; caughtUpAt the
	// WAL's end when it began to stream (it is caught up once it has
	// everything before it: markEnd); seen the furthest the server said it
	// has decoded.
	startedAt, caughtUpAt, seen slot.LSN

	// The targets: by the source table's OID, and in name order (the
	// order of their locks and flushes).
	ch     *target.Server
	tables map[uint32]*syncTable
	order  []*syncTable

	ledger *target.SyncLedger
	last   *target.SyncEntry // the sync ledger's latest row of the slot

	f    flush
	tx   slot.Begin // the transaction being read
	open bool       // inside a transaction
	// replay: the transaction being read commits before the sync ledger's
	// position, so an earlier flush applied it (positions.go: applied).
	replay   bool
	replayed int    // transactions skipped as applied
	done     bool   // caught up, or a budget ended
	why      string // why the run ended

	res Result
	// republished are the tables setup added to the publication: it
	// lacked them, so they join (joined.go).
	republished map[string]bool
	// unpublished are relations the stream holds changes of that the
	// publication no longer publishes (skipped: table).
	unpublished map[uint32]bool
	// resynced are the tables loaded again by this run, followed the
	// schema changes its targets followed in place.
	resynced []resynced
	followed []string
}
