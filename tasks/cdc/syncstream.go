package cdc

import (
	"context"
	"fmt"
	"time"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/slot"
)

// readFlush reads whole committed transactions into the flush until it
// holds FlushChanges changes, the slot is caught up (quiet for idleWait
// between transactions), or a budget ends; the rows of the transaction
// being read wait in their tables' open lists and join the flush at its
// commit.
func (r *syncRun) readFlush(ctx context.Context) error {
	r.stop.step = stepStream
	for {
		ev, err := r.stream.Next(ctx)
		if err != nil {
			return err
		}
		switch ev.Kind {
		case slot.KindBegin:
			r.tx, r.open = ev.Tx, true
		case slot.KindRelation:
			if err := r.relation(ctx, ev); err != nil {
				return err
			}
		case slot.KindInsert, slot.KindUpdate, slot.KindDelete:
			if err := r.change(ev); err != nil {
				return err
			}
		case slot.KindTruncate:
			for _, rel := range ev.Truncated {
				t, err := r.table(rel)
				if err != nil {
					return err
				}
				t.open = append(t.open, change.Row{Deleted: true, Meta: change.Meta{Op: change.OpTruncate, LSN: uint64(ev.WALStart),
					DeletedSet: true}})
			}
		case slot.KindCommit:
			if err := r.commit(ev.Commit); err != nil {
				return err
			}
			if r.full() {
				return nil
			}
		case slot.KindIdle:
			if !r.open {
				r.done, r.why = true, "caught up"
				return nil
			}
		}
	}
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

// table is the run's table of a relation the stream reports.
func (r *syncRun) table(rel *slot.Relation) (*syncTable, error) {
	t := r.tables[rel.ID]
	if t == nil {
		return nil, outcome.Refused.Mark(fmt.Errorf("%w: table %s (OID %d) was added to publication %s after the run began; "+
			"run changesink cdc setup to load it", change.ErrNotLoaded, rel.QualifiedName(), rel.ID, r.cfg.Publication))
	}
	return t, nil
}

// change reads an insert, update or delete into its table's open rows. An
// update that changed the key is a delete of the old key and a create of
// the new one, as Debezium sends it.
func (r *syncRun) change(ev *slot.Event) error {
	t, err := r.table(ev.Relation)
	if err != nil {
		return err
	}
	if t.rel != ev.Relation {
		if err := t.decoders(ev.Relation); err != nil {
			return err
		}
	}
	lsn := uint64(ev.WALStart)
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
			if err := t.read(ev.Old, change.OpDelete, ev.OldKind == slot.OldFull, lsn); err != nil {
				return err
			}
			return t.read(ev.New, change.OpCreate, false, lsn)
		}
	}
	return t.read(ev.New, change.OpUpdate, false, lsn)
}

// commit adds the transaction's rows to their tables' batches, in order,
// with the commit's floor, and moves the flush's position to its end.
func (r *syncRun) commit(c slot.Commit) error {
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
