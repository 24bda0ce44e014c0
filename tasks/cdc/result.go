package cdc

import (
	"fmt"
	"time"

	"github.com/changesink/changesink/internal/kestra"
	"github.com/changesink/changesink/tasks/cdc/applier"
)

// Output file names, as the seed's tasks name them.
const (
	ExpectedFile = "expected.jsonl"
	PendingFile  = "pending.jsonl"
)

// Result is the outcome of one applied batch.
type Result struct {
	// Counts are the batch's counts and the durations of the steps that
	// read, insert and verify it.
	applier.Counts
	// View is the live view to query.
	View string
	// Decode and Total are the durations of the decode and of the run.
	Decode, Total time.Duration
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
