package slotsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/applier"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/internal/testhook"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/slot"
	"github.com/changesink/changesink/tasks/cdc/target"
)

// flush is what a sync run has gathered since it last confirmed the slot:
// whole committed transactions, their rows added to each table's batch in
// commit order.
type flush struct {
	transactions, changes int64
	// through is the end of the last transaction's commit: once every
	// table's rows are applied and verified, the position to record and
	// confirm.
	through uint64
	// floor is the end of the commit before the next transaction: its
	// changes' versions are above it (change.Raise), so versions follow
	// commit order across transactions, runs and the slot's snapshot.
	floor  uint64
	sumBuf []byte
}

// add adds a change of the transaction xid to t's batch, with the
// transaction's commit floor.
func (f *flush) add(t *syncTable, xid uint32, r change.Row) error {
	r.Meta.TxID, r.Meta.TxIDSet = int64(xid), true
	r.Meta.Commit, r.Meta.CommitSet, r.Meta.Sequenced = f.floor, true, true
	r.Meta.Sum, f.sumBuf = change.EventSum(f.sumBuf, &r)
	if err := t.batch.Add(r); err != nil {
		return outcome.Refused.Mark(fmt.Errorf("table %s, transaction %d: %w", t.name(), xid, err))
	}
	if len(t.batch.OutOfOrder) > 0 {
		// The stream is in commit order and versions follow it: a key
		// whose version went down is a bug, not the source's doing.
		return fmt.Errorf("internal error: table %s, transaction %d: a change at LSN %s below its key's version",
			t.name(), xid, slot.LSN(r.Meta.LSN))
	}
	t.rows++
	f.changes++
	return nil
}

// commit closes a transaction that ended at end.
func (f *flush) commit(end uint64) {
	f.transactions++
	f.through, f.floor = end, end
}

// applyFlush applies the flush: each table's rows through the steps of
// Apply, table by table in name order, each read back; then the flush's
// row in the sync ledger; then the slot confirmed up to it. A failure
// before the confirm leaves the slot where it was: the re-run gets the same
// transactions again; it skips those the ledger row holds (applied) and
// applies the others again, each key a replay of its version.
func (r *syncRun) applyFlush(ctx context.Context) error {
	if r.f.transactions == 0 {
		return nil
	}
	counts := map[string]int64{}
	alive := r.keepAlive(ctx)
	for _, t := range r.order {
		if t.rows == 0 && t.batch.Trunc == nil {
			continue
		}
		counts[t.name()] = t.rows
		if err := t.apply(ctx); err != nil {
			alive()
			return err
		}
	}
	r.stop.Step = applier.StepLedger
	e := target.SyncEntry{Slot: r.cfg.Slot, Holder: r.holderID(), SystemID: r.systemID, SourceDB: r.source,
		Through: r.f.through, Transactions: uint64(r.f.transactions), Changes: uint64(r.f.changes), Tables: countsJSON(counts)}
	err := r.appendLedger(ctx, &e)
	if lost := alive(); err == nil {
		err = lost
	}
	if err != nil {
		return err
	}
	r.last = &e
	r.stop.Step = applier.StepConfirm
	if err := testhook.Run(ctx, r.env.Hooks.Recorded); err != nil {
		return err
	}
	if err := r.stream.Confirm(ctx, slot.LSN(r.f.through)); err != nil {
		return err
	}
	r.res.Transactions += r.f.transactions
	r.res.Changes += r.f.changes
	r.res.Flushes++
	r.log.Info(fmt.Sprintf("cdc: applied %d transactions (%d changes) through %s, verified and confirmed",
		r.f.transactions, r.f.changes, slot.LSN(r.f.through)))
	r.f.transactions, r.f.changes = 0, 0
	return nil
}

// aliveEvery is how often a flush being applied tells the server its
// stream is alive: well within wal_sender_timeout (a minute by default),
// after which the server ends a stream it has not heard from.
const aliveEvery = time.Second

// keepAlive sends the stream's heartbeat every aliveEvery while the flush
// writes ClickHouse (nothing else uses the stream then), until the
// returned func is called; that func returns the heartbeat's failure, if
// one failed: the stream is lost, and the flush must not be confirmed.
func (r *syncRun) keepAlive(ctx context.Context) (stop func() error) {
	if r.stream == nil {
		return func() error { return nil } // setup's load: no stream yet
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		tick := time.NewTicker(aliveEvery)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				done <- nil
				return
			case <-tick.C:
				if err := r.stream.Heartbeat(ctx); err != nil && ctx.Err() == nil {
					done <- err
					return
				}
			}
		}
	}()
	return func() error { cancel(); return <-done }
}

// applyBefore applies, before a refusal of a transaction it was reading,
// the transactions the flush holds (committed before it), so that the run
// stops at the refused transaction with everything before it applied and
// confirmed; it returns the refusal, or why the flush failed.
func (r *syncRun) applyBefore(ctx context.Context, refusal error) error {
	if outcome.Classify(refusal) != outcome.Refused || r.f.transactions == 0 {
		return refusal
	}
	if err := r.applyFlush(ctx); err != nil {
		return err
	}
	return refusal
}

// endAtJoin ends the run before a transaction that changes a table that
// joined the publication after the run began (a *joinedError; any other
// error goes to applyBefore): the transactions before it are applied and
// confirmed, nothing of it or after it, and the run ends without a
// failure, saying so (the ended output). The flow's next execution runs
// cdc setup, which loads that table alone; sync then streams on from the
// transaction. Without setup, the next sync refuses the table, naming it.
func (r *syncRun) endAtJoin(ctx context.Context, err error) error {
	var j *joinedError
	if !errors.As(err, &j) {
		return r.applyBefore(ctx, err)
	}
	if r.f.transactions > 0 {
		if err := r.applyFlush(ctx); err != nil {
			return err
		}
	}
	r.done, r.why = true, fmt.Sprintf("table %s joined publication %s: cdc setup loads it, then sync streams on from %s", j.table, j.pub, j.at)
	r.log.Warn(fmt.Sprintf("cdc: %v: applied and confirmed the transactions before it; cdc setup (the flow's next execution) loads the table, "+
		"then sync streams on from there", j))
	return nil
}

// apply applies the table's rows of the flush: the steps of Apply under
// the table's lock, then an empty batch for the next flush.
func (t *syncTable) apply(ctx context.Context) error {
	if err := t.run.Apply(ctx, t.batch); err != nil {
		return tableErr(t, err)
	}
	t.batch.Reset()
	t.rows = 0
	return nil
}

// tableErr names the table and the target a failure is about.
func tableErr(t *syncTable, err error) error {
	return fmt.Errorf("table %s → %s: %w", t.name(), mapping.Qualified(t.m.Target.Database, t.m.Target.Table), err)
}

// countsJSON renders a flush's changes per table for the sync ledger.
func countsJSON(counts map[string]int64) string {
	b, err := json.Marshal(counts) // map keys come out sorted
	if err != nil {
		return "{}"
	}
	return string(b)
}

// holderID is the id of the run's locks, which the sync ledger records.
func (r *syncRun) holderID() string {
	if len(r.order) > 0 && r.order[0].run.Lock != nil {
		return r.order[0].run.Lock.ID
	}
	return ""
}

// appendLedger appends e to the sync ledger after the last row, fenced by
// the first target's lock (target.Fence), then checks that lock: still
// the run's, it proves the row was written under it.
func (r *syncRun) appendLedger(ctx context.Context, e *target.SyncEntry) error {
	var lk *target.Lock
	var f target.Fence
	if len(r.order) > 0 && r.order[0].run.Lock != nil {
		lk = r.order[0].run.Lock
		f = lk.Fence()
	}
	if err := r.ledger.Append(ctx, r.last, e, f); err != nil {
		return err
	}
	if lk != nil {
		return lk.Check(ctx)
	}
	return nil
}
