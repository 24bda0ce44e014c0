package applier

import (
	"context"
	"log/slog"
	"time"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/internal/testhook"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/merge"
	"github.com/changesink/changesink/tasks/cdc/target"
)

// Table applies batches to one target while it holds the target's lock:
// the steps ReadTarget, SelectPending, Insert, Verify and Record, which cdc
// apply runs on the batch of a file (with its output files between) and
// cdc sync on each table's batch of the stream (Apply).
type Table struct {
	// M maps the source table to the target Tbl, held under Lock.
	M    *mapping.Mapping
	Tbl  *target.Table
	Lock *target.Lock
	// Hooks are the tests' (internal/testhook); zero in a real run.
	Hooks testhook.Hooks
	// Origin is where the batches come from.
	Origin Origin
	// Stop is the step the run is in, for a stopped run's message.
	Stop *Stop
	// Res holds the counts and timings the steps add to.
	Res *Counts
	Log *slog.Logger
	// OnRows, when set, gets a batch's final rows as soon as ReadTarget
	// knows them (cdc apply writes expected.jsonl while the target is
	// read).
	OnRows func([]*change.Row)
}

// Origin is where a batch comes from: what reads it again and what the
// ledger records of its source.
type Origin interface {
	// Redecode reads the batch again, starting the keys the previous batch
	// left with two live rows from the target's rows of them.
	Redecode(ctx context.Context, tbl *target.Table, open []change.OpenKey, replay bool) (*merge.Batch, error)
	// Source is the source's identity, as the ledger records it.
	Source() change.SourceID
}

// Counts are what the steps of one target's batches add up: cdc apply's
// outputs, and each table's share of a cdc sync run.
type Counts struct {
	// Events is the number of change events in the batch; Keys the distinct keys.
	Events, Keys int64
	// Pending keys were written (absent from the target or older there);
	// Skipped keys were already there at this LSN or newer; Deletes counts
	// the delete markers among the pending rows; Verified the keys read back.
	Pending, Skipped, Deletes, Verified int64
	// Recreated keys were created again while live (a DELETE or TRUNCATE
	// missing from the batches): applied as upserts, and warned of.
	Recreated int64
	// SnapshotDeleted keys of the target were absent from a complete
	// snapshot that ended in the batch, below its point: deleted at it
	// (merge.Batch.endSnapshot), and warned of.
	SnapshotDeleted int64
	// Read, Insert and Verify are the durations of the steps.
	Read, Insert, Verify time.Duration
}

// Apply applies b: ReadTarget, SelectPending, Insert, Verify and Record,
// under the lock the Table holds.
func (t *Table) Apply(ctx context.Context, b *merge.Batch) error {
	rd, err := t.ReadTarget(ctx, b)
	if err != nil {
		return err
	}
	sel, err := t.SelectPending(rd)
	if err != nil {
		return err
	}
	if err := t.Insert(ctx, sel.Pending); err != nil {
		return err
	}
	if err := t.Verify(ctx, rd); err != nil {
		return err
	}
	return t.Record(ctx, rd, sel)
}
