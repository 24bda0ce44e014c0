package applier

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/merge"
	"github.com/changesink/changesink/tasks/cdc/target"
)

// Reading is what ReadTarget learnt: the batch as the ledger places it,
// its rows and the target's current rows of their keys.
type Reading struct {
	b    *merge.Batch
	led  change.LedgerState
	prev *change.LedgerEntry // the ledger row this batch follows; nil: none
	// rows are the batch's latest row per key in key order, with the
	// delete markers of a TRUNCATE for the target's other keys.
	rows    []*change.Row
	current map[string]*change.Row // the target's winning row per key
	open    []change.OpenKey       // keys left with two live rows
}

// ReadTarget reads, under the lock, the ledger (a replay? what does this
// batch follow?) and the target's rows of the batch's keys: the previous
// values of unchanged TOAST columns, the current versions, the older rows
// of keys whose key changes, and the live keys a TRUNCATE removes.
func (t *Table) ReadTarget(ctx context.Context, b *merge.Batch) (_ Reading, err error) {
	tbl := t.Tbl
	step := time.Now()
	rd := Reading{b: b}
	if rd.led, err = tbl.EnsureLedger(ctx, t.Lock.Fence(), b.Digest()); err != nil {
		return rd, err
	}
	rd.prev = rd.led.Last
	if rd.led.Replay != nil {
		rd.prev = rd.led.BeforeReplay
	}
	if rd.prev != nil && len(rd.prev.OpenKeys) > 0 {
		// The previous batch left keys with two live rows: decode again,
		// starting those keys from what it left.
		if rd.b, err = t.Origin.Redecode(ctx, tbl, rd.prev.OpenKeys, rd.led.Replay != nil); err != nil {
			return rd, err
		}
	}
	if rd.prev != nil {
		rd.b.FloorAt(rd.prev.SnapshotLSN)
	}
	rd.rows = rd.b.Sorted()
	if err := fillUnchanged(ctx, tbl, rd.rows, rd.b.Trunc); err != nil {
		return rd, err
	}
	// The rows are final here, unless a TRUNCATE adds markers to them (then
	// once they are known): onRows may write them out while the target is
	// read.
	if rd.b.Trunc == nil && t.OnRows != nil {
		t.OnRows(rd.rows)
	}
	if rd.current, err = tbl.Current(ctx, rd.rows); err != nil {
		return rd, fmt.Errorf("read the target's rows before the insert: %w", err)
	}
	if stale := merge.StaleFills(rd.rows, rd.current); len(stale) > 0 {
		if err := refill(ctx, tbl, stale); err != nil {
			return rd, err
		}
		if rd.b.Trunc == nil && t.OnRows != nil {
			t.OnRows(rd.rows) // again, with the values taken from the target
		}
	}
	if rd.open, err = keyChangesOf(ctx, tbl, rd.b, rd.current); err != nil {
		return rd, err
	}
	t.noteRecreated(rd.b.Recreated)
	if rd.b.Trunc != nil {
		before := len(rd.rows)
		if rd.rows, err = withTruncated(ctx, tbl, rd.b, rd.rows); err != nil {
			return rd, err
		}
		t.noteSnapshotEnd(rd.b.Trunc, int64(len(rd.rows)-before))
		if t.OnRows != nil {
			t.OnRows(rd.rows)
		}
	}
	t.Res.Events, t.Res.Keys = t.Res.Events+rd.b.Events, t.Res.Keys+int64(len(rd.rows))
	t.Res.Read += time.Since(step)
	return rd, nil
}

// noteRecreated warns of the keys the batch creates again while they are
// live (merge.Recreated): applied as upserts, each is a sign of a DELETE
// or TRUNCATE the batches did not carry.
func (t *Table) noteRecreated(rc merge.Recreated) {
	t.Res.Recreated += rc.Keys
	if rc.Keys == 0 {
		return
	}
	shown := make([]string, len(rc.First))
	for n, k := range rc.First {
		shown[n] = fmt.Sprintf("key %s (transaction %d", k.Key, k.Tx)
		if k.Record > 0 {
			shown[n] += fmt.Sprintf(", record %d", k.Record)
		}
		shown[n] += ")"
	}
	t.Log.Warn(fmt.Sprintf("cdc: %s: %d keys were created again while live, with no delete of the older row: applied as upserts. "+
		"A DELETE or TRUNCATE the batches did not carry removed them in the source (the trigger drops TRUNCATE unless skipped.operations is none); "+
		"rows it removed that were not created again stay live in the target until a complete snapshot (a re-snapshot) deletes them. First: %s",
		mapping.Qualified(t.M.Target.Database, t.M.Target.Table), rc.Keys, strings.Join(shown, ", ")))
}

// noteSnapshotEnd warns of the n keys a complete snapshot that ended at
// tr (merge.Batch.endSnapshot) deletes from the target: live below its
// point, absent from it.
func (t *Table) noteSnapshotEnd(tr *change.Row, n int64) {
	if tr.Meta.Snapshot == "" || n == 0 {
		return
	}
	t.Res.SnapshotDeleted += n
	t.Log.Warn(fmt.Sprintf("cdc: %s: a complete snapshot ended at LSN %d (record %d): %d keys the target held live below it are not in it, "+
		"and get delete markers at it: the source deleted them before the snapshot (a TRUNCATE the trigger dropped, or deletes before "+
		"its offsets were reset). If the trigger's snapshots may leave rows out (snapshot.select.statement.overrides, a filtered ad hoc "+
		"snapshot), set source.partial_snapshots: true in the mapping",
		mapping.Qualified(t.M.Target.Database, t.M.Target.Table), tr.Version, tr.Record, n))
}

// fillUnchanged fills the unchanged TOAST values the batch could not from
// the target's current rows of those keys (merge.FillFromTarget).
func fillUnchanged(ctx context.Context, tbl *target.Table, rows []*change.Row, trunc *change.Row) error {
	need := merge.UnchangedRows(rows)
	if len(need) == 0 {
		return nil
	}
	cur, err := tbl.Read(ctx, need)
	if err != nil {
		return err
	}
	_, err = merge.FillFromTarget(tbl.M, need, cur, trunc)
	return err
}

// refill takes the unchanged TOAST values of stale again from the
// target's rows (merge.Refill).
func refill(ctx context.Context, tbl *target.Table, stale []*change.Row) error {
	cur, err := tbl.Read(ctx, stale)
	if err != nil {
		return fmt.Errorf("read the target's rows before the insert: %w", err)
	}
	return merge.Refill(tbl.M, stale, cur)
}

// keyChangesOf runs the batch's key-change checks against the target's
// current rows, reading the older rows of the keys it carries to the next
// batch, and returns the keys left open.
func keyChangesOf(ctx context.Context, tbl *target.Table, b *merge.Batch, current map[string]*change.Row) ([]change.OpenKey, error) {
	kc, err := b.CheckKeyChanges(current)
	if err != nil {
		return nil, err
	}
	var old map[string]*change.Row
	if len(kc.Carried) > 0 {
		if old, err = tbl.Read(ctx, kc.Carried); err != nil {
			return nil, err
		}
	}
	return b.OpenCarried(kc, old)
}

// withTruncated adds to rows a delete marker, at the batch's TRUNCATE, for
// every key the target holds live at an older version and the batch does
// not hold, in key order.
func withTruncated(ctx context.Context, tbl *target.Table, b *merge.Batch, rows []*change.Row) ([]*change.Row, error) {
	markers, err := tbl.Truncated(ctx, b.Trunc, b.Has)
	if err != nil || len(markers) == 0 {
		return rows, err
	}
	rows = append(rows, markers...)
	slices.SortFunc(rows, func(x, y *change.Row) int { return change.CompareKeys(tbl.M, x, y) })
	return rows, nil
}
