package slotsync

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/changesink/changesink/tasks/cdc/applier"
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
	if err := r.markEnd(ctx); err != nil {
		return nil, err
	}
	for !r.done {
		if err := r.readFlush(ctx); err != nil {
			if err := r.endAtJoin(ctx, err); err != nil {
				return nil, err
			}
			return r.result(ctx), nil
		}
		if err := r.applyFlush(ctx); err != nil {
			return nil, err
		}
	}
	if err := r.confirmIdle(ctx); err != nil {
		return nil, err
	}
	return r.result(ctx), nil
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
	done bool       // caught up, or a budget ended
	why  string     // why the run ended

	res Result
	// republished are the tables setup added to the publication: it
	// lacked them, so they join (joined.go).
	republished map[string]bool
}
