package slotsync

import (
	"context"
	"fmt"
	"time"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/applier"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/slot"
)

// readFlush reads whole committed transactions into the flush until it
// holds FlushChanges changes, the slot is caught up (quiet for idleWait
// between transactions), or a budget ends; the rows of the transaction
// being read wait in their tables' open lists and join the flush at its
// commit.
func (r *syncRun) readFlush(ctx context.Context) error {
	r.stop.Step = applier.StepStream
	for {
		ev, err := r.stream.Next(ctx)
		if err != nil {
			return err
		}
		switch ev.Kind {
		case slot.KindBegin:
			r.tx, r.open, r.replay = ev.Tx, true, r.applied(ev.Tx)
		case slot.KindRelation:
			if err := r.relation(ctx, ev); err != nil {
				return err
			}
		case slot.KindInsert, slot.KindUpdate, slot.KindDelete, slot.KindTruncate, slot.KindCommit:
			if r.replay {
				if err := r.skipReplayed(ctx, ev); err != nil {
					return err
				}
				break
			}
			if err := r.event(ctx, ev); err != nil {
				return err
			}
			if ev.Kind == slot.KindCommit && r.full() {
				return nil
			}
		case slot.KindKeepalive, slot.KindIdle:
			if ev.Kind == slot.KindKeepalive {
				r.seen = max(r.seen, ev.WALEnd)
			}
			if r.open {
				break
			}
			if r.caughtUp() {
				r.done, r.why = true, whyCaughtUp
				return nil
			}
			if time.Since(r.start) >= r.cfg.MaxDuration {
				r.done, r.why = true, fmt.Sprintf("%s %s reached", EnvMaxDuration, r.cfg.MaxDuration)
				return nil
			}
		}
	}
}

// event reads a change, a TRUNCATE or a commit of a transaction the
// targets do not hold yet into the flush.
func (r *syncRun) event(ctx context.Context, ev *slot.Event) error {
	switch ev.Kind {
	case slot.KindInsert, slot.KindUpdate, slot.KindDelete:
		t, err := r.table(ctx, ev.Relation)
		if err != nil {
			return err
		}
		if t == nil || !t.streams() {
			return nil
		}
		err = r.change(ctx, t, ev)
		if holdable(err) {
			// The table's own source refused: hold it, not the slot.
			err = r.holdTable(ctx, t, r.tx.FinalLSN, err)
		}
		if err != nil {
			return err
		}
	case slot.KindTruncate:
		for _, rel := range ev.Truncated {
			t, err := r.table(ctx, rel)
			if err != nil {
				return err
			}
			if t == nil || !t.streams() {
				continue
			}
			t.open = append(t.open, change.Row{Deleted: true, Meta: change.Meta{Op: change.OpTruncate, LSN: uint64(ev.WALStart),
				DeletedSet: true}})
		}
	case slot.KindCommit:
		return r.commit(ev.Commit)
	}
	return nil
}

// full reports a flush to apply now: it holds FlushChanges changes, or a
// budget ended (the run then stops after it).
func (r *syncRun) full() bool {
	switch {
	case r.cfg.MaxChanges > 0 && r.res.Changes+r.f.changes >= r.cfg.MaxChanges:
		r.done, r.why = true, fmt.Sprintf("%s %d reached", EnvMaxChanges, r.cfg.MaxChanges)
	case time.Since(r.start) >= r.cfg.MaxDuration:
		r.done, r.why = true, fmt.Sprintf("%s %s reached", EnvMaxDuration, r.cfg.MaxDuration)
	}
	return r.done || r.f.changes >= int64(r.cfg.FlushChanges)
}

// table is the run's table of a relation the stream reports. A table
// the run does not know is one that joined the publication after the run
// began (a *joinedError), or one the publication no longer publishes (it
// was added and removed again by hand): its changes in the slot are
// skipped, nil, and said once.
func (r *syncRun) table(ctx context.Context, rel *slot.Relation) (*syncTable, error) {
	if t := r.tables[rel.ID]; t != nil {
		return t, nil
	}
	if r.unpublished[rel.ID] {
		return nil, nil
	}
	var published bool
	if err := r.conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = $3)`,
		r.cfg.Publication, rel.Namespace, rel.Name).Scan(&published); err != nil {
		return nil, sourceErr(fmt.Errorf("read whether publication %s publishes %s: %w", r.cfg.Publication, rel.QualifiedName(), err))
	}
	if !published {
		if r.unpublished == nil {
			r.unpublished = map[uint32]bool{}
		}
		r.unpublished[rel.ID] = true
		r.log.Warn(fmt.Sprintf("cdc: the slot holds changes of table %s (OID %d), which publication %s no longer publishes: skipped",
			rel.QualifiedName(), rel.ID, r.cfg.Publication))
		return nil, nil
	}
	return nil, outcome.Refused.Mark(&joinedError{table: rel.QualifiedName(), oid: rel.ID, pub: r.cfg.Publication, at: r.tx.FinalLSN})
}

// joinedError is a change of a table that joined the publication after
// the run began, in the transaction that commits at at: no load of it
// has ended, so the run cannot apply the transaction (endAtJoin).
type joinedError struct {
	table string
	oid   uint32
	pub   string
	at    slot.LSN
}

func (e *joinedError) Error() string {
	return fmt.Sprintf("%v: table %s (OID %d) joined publication %s after the run began (transaction committing at %s)",
		change.ErrNotLoaded, e.table, e.oid, e.pub, e.at)
}

func (e *joinedError) Unwrap() error { return change.ErrNotLoaded }

// change reads an insert, update or delete into its table's open rows. An
// update that changed the key is a delete of the old key and a create of
// the new one, as Debezium sends it.
func (r *syncRun) change(ctx context.Context, t *syncTable, ev *slot.Event) error {
	lsn := uint64(ev.WALStart)
	if r.inLoad(t) {
		if t.rel != ev.Relation {
			t.decodersBelow(ev.Relation)
		}
		return r.belowLoad(t, ev, lsn)
	}
	if t.untaken != nil && t.untaken == ev.Relation {
		if err := r.takeIn(ctx, t, ev.Relation, r.tx.FinalLSN, relationAt(ev)+", defined in a replayed one"); err != nil {
			return err
		}
	}
	if t.rel != ev.Relation {
		if err := t.decoders(ev.Relation); err != nil {
			return err
		}
	}
	switch ev.Kind {
	case slot.KindInsert:
		return t.read(ev.New, change.OpCreate, false, lsn)
	case slot.KindDelete:
		return t.read(ev.Old, change.OpDelete, ev.OldKind == slot.OldFull, lsn)
	}
	if ev.OldKind != 0 {
		oldKey, err := t.keyOf(ev.Old)
		if err != nil {
			return err
		}
		newKey, err := t.keyOf(ev.New)
		if err != nil {
			return err
		}
		if oldKey != newKey {
			return r.moveKey(ctx, t, ev, oldKey, lsn)
		}
	}
	row, err := t.readRow(ev.New, change.OpUpdate, false, false, lsn)
	if err != nil {
		return err
	}
	if row.Unchanged && ev.OldKind == slot.OldFull {
		// REPLICA IDENTITY FULL: the unchanged values are in the old row.
		old, err := t.readRow(ev.Old, change.OpUpdate, false, false, lsn)
		if err != nil {
			return err
		}
		fillToast(&row, &old)
	}
	t.open = append(t.open, row)
	return nil
}

// commit adds the transaction's rows to their tables' batches, in order,
// with the commit's floor, and moves the flush's position to its end.
func (r *syncRun) commit(c slot.Commit) error {
	r.raiseFloor(c)
	for _, t := range r.order {
		for i := range t.open {
			if err := r.f.add(t, r.tx.Xid, t.open[i]); err != nil {
				return err
			}
		}
		t.open = t.open[:0]
	}
	r.f.commit(uint64(c.End))
	r.open = false
	return nil
}

// moveKey reads an update that changed the key: a delete of the old key
// and a create of the new one. The new row's unchanged TOAST values (the
// server sends none: the value did not change) are the old key's: from
// this transaction's rows, the flush's, else the target's.
func (r *syncRun) moveKey(ctx context.Context, t *syncTable, ev *slot.Event, oldKey string, lsn uint64) error {
	row, err := t.readRow(ev.New, change.OpCreate, false, true, lsn)
	if err != nil {
		return err
	}
	if row.Unchanged && ev.OldKind == slot.OldFull {
		old, err := t.readRow(ev.Old, change.OpUpdate, false, false, lsn)
		if err != nil {
			return err
		}
		fillToast(&row, &old)
	}
	if row.Unchanged {
		if err := t.fillMoved(ctx, &row, oldKey, lsn, change.Raise(lsn, r.f.floor)); err != nil {
			return err
		}
	}
	if err := t.read(ev.Old, change.OpDelete, ev.OldKind == slot.OldFull, lsn); err != nil {
		return err
	}
	t.open = append(t.open, row)
	return nil
}

// fillMoved fills the unchanged values of row, the new row of a key that
// changed from oldKey (at version), from the old key's newest row: this
// transaction's, else the flush's, else (for what those leave unchanged
// too) the target's. When the target no longer holds the old key live but
// holds the new one at this version or a newer one, the change was applied
// before (a re-delivery after a lost confirm): its values stay for the
// batch's TOAST fill, which takes them from that row or skips it.
func (t *syncTable) fillMoved(ctx context.Context, row *change.Row, oldKey string, lsn, version uint64) error {
	var prev *change.Row
	for i := len(t.open) - 1; i >= 0 && prev == nil; i-- {
		if t.open[i].Key == oldKey {
			prev = &t.open[i]
		}
	}
	if prev == nil {
		prev = t.batch.Row(oldKey)
	}
	if prev != nil && !prev.Deleted {
		fillToast(row, prev)
	}
	if (prev == nil || row.Unchanged) && (prev == nil || !prev.Deleted) {
		// Left unchanged by the run's rows too (or not in them): the
		// target holds the old key's value.
		got, err := t.run.Tbl.Read(ctx, []*change.Row{{Key: oldKey, Vals: change.KeyValues(t.m, oldKey)}, row})
		if err != nil {
			return fmt.Errorf("table %s: read the row of a changed key: %w", t.name(), err)
		}
		if prev = got[oldKey]; prev != nil && !prev.Deleted {
			fillToast(row, prev)
		} else if cur := got[row.Key]; cur != nil && cur.Version >= version {
			return nil
		}
	}
	if row.Unchanged {
		return t.refuse(row.Vals, keysGot(t), lsn, firstToast(t, *row), fmt.Errorf(
			"%w: the key changed and the old key's row is neither in this run nor live in the target", change.ErrToast))
	}
	return nil
}

// fillToast takes row's unchanged values from prev, the row's previous
// version; row stays Unchanged where prev is unchanged too.
func fillToast(row, prev *change.Row) {
	row.Unchanged = false
	for i := range row.Vals {
		if row.Vals[i].Toast {
			v := prev.Vals[i]
			v.Filled = true
			row.Vals[i] = v
			row.Unchanged = row.Unchanged || v.Toast
		}
	}
}

// keysGot marks every key column known, for a refusal's message.
func keysGot(t *syncTable) []bool {
	got := make([]bool, len(t.m.Cols))
	for _, i := range t.m.KeyIdx {
		got[i] = true
	}
	return got
}

// firstToast names the first column of r that holds an unchanged value.
func firstToast(t *syncTable, r change.Row) string {
	for i, v := range r.Vals {
		if v.Toast {
			return t.m.Cols[i].Name
		}
	}
	return ""
}
