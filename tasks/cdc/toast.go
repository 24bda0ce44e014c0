package cdc

import (
	"context"
	"fmt"

	"github.com/changesink/changesink/internal/outcome"
)

// Unchanged TOAST values. Under REPLICA IDENTITY DEFAULT an update that does
// not touch a TOASTed column (text, jsonb, bytea over about 2 kB) carries
// Debezium's placeholder instead of the value: PostgreSQL logs the new row
// with a pointer to the same out-of-line value and leaves it out of the WAL.
// The placeholder therefore means "the value of the row's previous
// version", and changesink takes it from there (the seed refused every
// placeholder):
//
//   - from the previous event of the key in the same batch (keepUnchanged):
//     a batch holds every change of the table in the window it covers, in
//     order, so the key's previous event is the row's previous version;
//   - else from the target's current row of the key when its version is
//     older than the event and not a delete (fillFromTarget): after every
//     earlier batch of the trigger was applied, that row is the row's
//     previous version. This rests on the delivery contract the rest of
//     the job rests on too: the batches are applied in order, none is
//     skipped (after a refusal the saved batch is replayed before the
//     trigger is re-enabled), and nothing else writes the table;
//   - a key whose target version is newer than the event is skipped
//     anyway: its value is never needed (expected.jsonl shows the
//     placeholder);
//   - anything else is refused, naming the key and the column: a create or
//     snapshot read with a placeholder (finish), an update whose previous
//     version in the batch is a delete, or whose key the target lacks or
//     holds deleted, or that a TRUNCATE earlier in the batch removed.

// keepUnchanged fills next's placeholders from prev, the key's previous
// event in the batch, which next replaces. A value prev did not know either
// stays a placeholder for the target to fill.
func keepUnchanged(m *Mapping, next, prev *row) error {
	if prev.deleted {
		return &RecordError{Record: next.rec, Offset: -1, Key: renderKey(m, next.vals), LSN: next.lsn, Column: firstUnchanged(m, next),
			Err: fmt.Errorf("%w: the update leaves the column unchanged, but the key's previous event in this batch "+
				"(record %d) is a delete, so there is no previous value; the batch is inconsistent, inspect it", ErrToast, prev.rec)}
	}
	next.unchanged = false
	for i := range next.vals {
		if !next.vals[i].toast {
			continue
		}
		v := prev.vals[i]
		if v.toast {
			next.unchanged = true
		} else {
			v.filled = true
		}
		next.vals[i] = v
	}
	return nil
}

// sameEvent is samePayload for two events of one key and LSN (one WAL
// record): a placeholder and the value an earlier copy of the event was
// given for it are the same.
func sameEvent(a, b *row) bool {
	if !a.unchanged && !b.unchanged {
		return samePayload(a, b)
	}
	if a.lsn != b.lsn || a.deleted != b.deleted || len(a.vals) != len(b.vals) {
		return false
	}
	for i := range a.vals {
		x, y := a.vals[i], b.vals[i]
		if (x.toast && (y.toast || y.filled)) || (y.toast && x.filled) {
			continue
		}
		if !x.equal(y) {
			return false
		}
	}
	return true
}

// fillFromTarget fills the placeholders the batch could not (the key's
// first event in the batch left a column unchanged) from the target's
// current row of each such key; see the rules above. It reads only those
// keys, and nothing when the batch has none. trunc is the batch's latest
// TRUNCATE (nil: none): a target row older than it is gone.
func fillFromTarget(ctx context.Context, t *table, rows []*row, trunc *row) (int, error) {
	var need []*row
	for _, r := range rows {
		if r.unchanged {
			need = append(need, r)
		}
	}
	if len(need) == 0 {
		return 0, nil
	}
	cur, err := t.read(ctx, need)
	if err != nil {
		return 0, err
	}
	m := t.m
	filled := 0
	for _, r := range need {
		c := cur[r.key]
		var why string
		switch {
		case c == nil:
			why = "the target does not hold the key"
		case c.lsn > r.lsn:
			continue // skipped: the target holds a newer version
		case c.deleted:
			why = fmt.Sprintf("the target holds the key deleted (LSN %d)", c.lsn)
		case trunc != nil && c.lsn < trunc.lsn:
			why = fmt.Sprintf("the TRUNCATE at record %d (LSN %d) removed the target's row", trunc.rec, trunc.lsn)
		}
		if why != "" {
			return 0, outcome.Refused.Mark(&RecordError{Record: r.rec, Offset: -1, Key: renderKey(m, r.vals), LSN: r.lsn, Column: firstUnchanged(m, r),
				Err: fmt.Errorf("%w: the update leaves the column unchanged since the row's previous version, but neither this batch "+
					"nor the target holds that version (%s); apply the trigger's earlier batches first, in order, then replay this one "+
					"(see the runbook)", ErrToast, why)})
		}
		for i := range r.vals {
			if r.vals[i].toast {
				v := c.vals[i]
				v.filled = true
				r.vals[i] = v
				filled++
			}
		}
		r.unchanged = false
	}
	return filled, nil
}

// checkFilled refuses, as an internal error, a row about to be written that
// still holds a placeholder: fillFromTarget leaves one only in keys the
// target holds newer, which are never pending.
func checkFilled(m *Mapping, pending []*row) error {
	for _, r := range pending {
		if r.unchanged {
			return fmt.Errorf("internal error: key %s (record %d) would be written with an unknown TOAST value in column %q",
				renderKey(m, r.vals), r.rec, firstUnchanged(m, r))
		}
	}
	return nil
}

func firstUnchanged(m *Mapping, r *row) string {
	for i := range r.vals {
		if r.vals[i].toast {
			return m.cols[i].name
		}
	}
	return ""
}
