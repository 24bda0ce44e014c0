package slotsync

import (
	"context"
	"fmt"
	"time"

	"github.com/changesink/changesink/internal/kestra"
	"github.com/changesink/changesink/tasks/cdc/applier"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/slot"
)

// Result is the outcome of a sync run: what it applied, per table and
// in all, and the slot's health when it ended.
type Result struct {
	Slot string
	// Transactions and Changes are the changes applied and confirmed;
	// Flushes the times the run confirmed the slot.
	Transactions, Changes, Flushes int64
	// From and Through are where the slot stood when the run began and
	// where it confirmed it at the end.
	From, Through slot.LSN
	// Why says why the run ended: caught up, or a budget.
	Why string
	// Tables are the counts of each table that had changes.
	Tables []TableResult
	// Health is the slot's state at the end (its lag, the WAL it retains);
	// HealthErr why it could not be read.
	Health    slot.Health
	HealthErr error
	// Behind is how long ago the oldest transaction the run left for the
	// next committed (0: caught up); BehindKnown is false when a budget
	// ended the run and the stream did not show that transaction soon.
	Behind      time.Duration
	BehindKnown bool
	Total       time.Duration
	// Resynced are the tables the run loaded again (resync.go), each with
	// why; SchemaChanges what the targets followed in place (schema.go);
	// Held the tables held (their changes skipped until a resync), each
	// with the position and why.
	Resynced      []resynced
	SchemaChanges []string
	Held          []Held
}

// Held is a held table: since which position, and why.
type Held struct {
	Table, Why string
	Since      slot.LSN
}

// TableResult is one table's share of a sync run.
type TableResult struct {
	Source, Target string
	applier.Counts
}

// result gathers the run's counts and reads the slot's health.
func (r *syncRun) result(ctx context.Context) *Result {
	res := &r.res
	res.Slot, res.From, res.Why = r.cfg.Slot, r.startedAt, r.why
	if r.last != nil {
		res.Through = slot.LSN(r.last.Through)
	}
	for _, t := range r.order {
		if t.res.Events == 0 {
			continue
		}
		res.Tables = append(res.Tables, TableResult{Source: t.name(), Target: mapping.Qualified(t.m.Target.Database, t.m.Target.Table), Counts: t.res})
	}
	res.Resynced, res.SchemaChanges = r.resynced, r.followed
	for _, t := range r.order {
		if t.hold.Gen != "" {
			res.Held = append(res.Held, Held{Table: t.name(), Why: t.hold.Detail, Since: slot.LSN(t.hold.Point)})
		}
	}
	res.Behind, res.BehindKnown = r.behind(ctx)
	res.Health, res.HealthErr = r.healthAfterConfirm(ctx)
	res.Total = time.Since(r.start)
	return res
}

// healthAfterConfirm reads the slot's health once the server has taken
// the run's last confirm (it reads the standby's status a moment after
// it is sent): the lag and retained WAL after this run, not before its
// own confirm, so an alert on them does not fire one run late.
func (r *syncRun) healthAfterConfirm(ctx context.Context) (slot.Health, error) {
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for wait := time.Now().Add(3 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		h, err := slot.ReadHealth(hctx, r.conn.PgConn(), r.cfg.Slot)
		if err != nil || r.last == nil || uint64(h.Confirmed) >= r.last.Through || time.Now().After(wait) {
			return h, err
		}
	}
}

// whyCaughtUp is the run's end (the ended output) when it read every
// change the source had committed.
const whyCaughtUp = "caught up"

// behind reads, when a budget ended the run, the commit time of the next
// transaction the slot holds (the stream's next Begin; nothing is
// confirmed by reading it): the age of the oldest change not applied.
func (r *syncRun) behind(ctx context.Context) (time.Duration, bool) {
	if r.why == whyCaughtUp {
		return 0, true
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if r.open {
		return max(0, time.Since(r.tx.CommitTime)), true // the transaction being read
	}
	if r.stream == nil {
		return 0, false // closed for a resync at the run's end
	}
	for {
		ev, err := r.stream.Next(pctx)
		if err != nil {
			return 0, false
		}
		if ev.Kind == slot.KindBegin {
			return max(0, time.Since(ev.Tx.CommitTime)), true
		}
	}
}

// Outputs implements kestra.Result: the totals, the slot's position and
// health, and each table's counts.
func (r *Result) Outputs() map[string]any {
	tables := map[string]any{}
	for _, t := range r.Tables {
		tables[t.Source] = map[string]any{"target": t.Target, "events": t.Events, "keys": t.Keys, "pending": t.Pending,
			"skipped": t.Skipped, "deletes": t.Deletes, "verified": t.Verified, "recreated": t.Recreated}
	}
	out := map[string]any{
		"slot": r.Slot, "transactions": r.Transactions, "changes": r.Changes, "flushes": r.Flushes,
		"from_lsn": r.From.String(), "through_lsn": r.Through.String(), "ended": r.Why, "tables": tables,
	}
	if r.BehindKnown {
		out["behind_seconds"] = r.Behind.Seconds()
	}
	out["resynced"] = resyncedOutputs(r.Resynced)
	out["schema_changes"] = append([]string{}, r.SchemaChanges...)
	held := map[string]any{}
	for _, h := range r.Held {
		held[h.Table] = map[string]any{"since_lsn": h.Since.String(), "why": h.Why}
	}
	out["held"] = held
	if r.HealthErr == nil {
		out["lag_bytes"], out["retained_wal_bytes"], out["wal_status"] = r.Health.LagBytes, r.Health.RetainedBytes, r.Health.WALStatus
		if r.Health.SafeWALSize >= 0 {
			out["safe_wal_size"] = r.Health.SafeWALSize
		}
	}
	return out
}

// Metrics implements kestra.Result: counters per run and per table, the
// slot's lag and retained WAL (gauges as counters: Kestra has no gauge),
// and the run's duration.
func (r *Result) Metrics() []kestra.Metric {
	tags := map[string]string{"slot": r.Slot}
	ms := []kestra.Metric{
		kestra.Counter("transactions", float64(r.Transactions), tags),
		kestra.Counter("changes", float64(r.Changes), tags),
		kestra.Timer("duration", r.Total, tags),
	}
	if r.BehindKnown {
		ms = append(ms, kestra.Timer("behind", r.Behind, tags))
	}
	if r.HealthErr == nil {
		ms = append(ms, kestra.Counter("lag_bytes", float64(r.Health.LagBytes), tags),
			kestra.Counter("retained_wal_bytes", float64(r.Health.RetainedBytes), tags))
	}
	for _, t := range r.Tables {
		tt := map[string]string{"slot": r.Slot, "table": t.Source}
		ms = append(ms, kestra.Counter("events", float64(t.Events), tt), kestra.Counter("pending", float64(t.Pending), tt),
			kestra.Counter("verified", float64(t.Verified), tt))
	}
	return ms
}

// Summary is the run's one-line log.
func (r *Result) Summary() string {
	lag := ""
	if r.HealthErr == nil {
		lag = fmt.Sprintf("; lag %d bytes, %d bytes of WAL retained (%s)", r.Health.LagBytes, r.Health.RetainedBytes, r.Health.WALStatus)
	}
	extra := ""
	if len(r.Resynced) > 0 {
		extra += fmt.Sprintf(" %d tables loaded again.", len(r.Resynced))
	}
	if len(r.Held) > 0 {
		extra += fmt.Sprintf(" %d tables held: their changes are skipped until a resync.", len(r.Held))
	}
	return fmt.Sprintf("Slot %s: %d transactions (%d changes) into %d tables applied, read back and confirmed from %s through %s (%s)%s.%s",
		r.Slot, r.Transactions, r.Changes, len(r.Tables), r.From, r.Through, r.Why, lag, extra)
}
