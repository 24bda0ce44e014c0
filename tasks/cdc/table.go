package cdc

import (
	"context"
	"log/slog"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/decode"
	"github.com/changesink/changesink/tasks/cdc/internal/testhook"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/merge"
	"github.com/changesink/changesink/tasks/cdc/target"
)

// tableRun applies batches to one target while it holds the target's
// lock: the steps readTarget, selectPending, insert, verify and record,
// which Apply runs on the batch of a file and Sync on each table's batch of
// the stream.
type tableRun struct {
	m      *mapping.Mapping
	tbl    *target.Table
	lk     *target.Lock
	hooks  testhook.Hooks
	origin origin
	stop   *stopState // the step the run is in, for a stopped run's message
	res    *Result    // the counts and timings the steps add to
	log    *slog.Logger
	// onRows, when set, gets a batch's final rows as soon as readTarget
	// knows them (Apply writes expected.jsonl while the target is read).
	onRows func([]*change.Row)
}

// origin is where a batch comes from: what reads it again and what the
// ledger records of its source.
type origin interface {
	// redecode reads the batch again, starting the keys the previous batch
	// left with two live rows from the target's rows of them.
	redecode(ctx context.Context, tbl *target.Table, open []change.OpenKey, replay bool) (*merge.Batch, error)
	// source is the source's identity, as the ledger records it.
	source() change.SourceID
}

// fileOrigin is a batch file of the Debezium trigger.
type fileOrigin struct {
	path    string
	workers int
	m       *mapping.Mapping
}

func (f fileOrigin) redecode(ctx context.Context, tbl *target.Table, open []change.OpenKey, replay bool) (*merge.Batch, error) {
	return redecodeWithSeeds(ctx, tbl, f.path, f.workers, open, replay)
}

// source reads the source identity of the batch's first event.
func (f fileOrigin) source() change.SourceID { return decode.SourceOf(f.path, f.m) }
