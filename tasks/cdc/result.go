package cdc

import (
	"fmt"
	"time"

	"github.com/changesink/changesink/internal/kestra"
)

// Output file names, as the seed's tasks name them.
const (
	ExpectedFile = "expected.jsonl"
	PendingFile  = "pending.jsonl"
)

// Result is the outcome of one applied batch.
type Result struct {
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
	// View is the live view to query.
	View string
	// Durations of the steps.
	Decode, Read, Insert, Verify, Total time.Duration
}

// Outputs implements kestra.Result: the seed's outputs
// (prepare_batch.events/keys, select_changes.pending/skipped/deletes) and
// verified.
func (r *Result) Outputs() map[string]any {
	return map[string]any{
		"events": r.Events, "keys": r.Keys, "pending": r.Pending,
		"skipped": r.Skipped, "deletes": r.Deletes, "verified": r.Verified, "recreated": r.Recreated,
		"snapshot_deleted": r.SnapshotDeleted,
	}
}

// Metrics implements kestra.Result: counters and step timers (seconds).
func (r *Result) Metrics() []kestra.Metric {
	tags := map[string]string{"view": r.View}
	return []kestra.Metric{
		kestra.Counter("events", float64(r.Events), tags),
		kestra.Counter("keys", float64(r.Keys), tags),
		kestra.Counter("pending", float64(r.Pending), tags),
		kestra.Counter("skipped", float64(r.Skipped), tags),
		kestra.Counter("deletes", float64(r.Deletes), tags),
		kestra.Counter("verified", float64(r.Verified), tags),
		kestra.Counter("recreated", float64(r.Recreated), tags),
		kestra.Counter("snapshot_deleted", float64(r.SnapshotDeleted), tags),
		kestra.Timer("decode", r.Decode, tags),
		kestra.Timer("read_current", r.Read, tags),
		kestra.Timer("insert", r.Insert, tags),
		kestra.Timer("verify", r.Verify, tags),
		kestra.Timer("duration", r.Total, tags),
	}
}

// Summary is the seed's summary log line.
func (r *Result) Summary() string {
	return fmt.Sprintf("%d captured events, %d newer keys applied (%d deletes), %d replayed/older keys skipped. "+
		"Read-back verified; query %s for current rows.", r.Events, r.Pending, r.Deletes, r.Skipped, r.View)
}
