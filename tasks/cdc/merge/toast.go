package merge

import (
	"fmt"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"

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
//     order, so the key's previous event is the row's previous version,
//     unless the target holds a version between the two (an overlapping
//     or replayed batch): then the target's row is, and the filled values
//     are taken again from it (Refill), or refused if it is a delete;
//   - else from the target's current row of the key when its version is
//     older than the event and not a delete (FillFromTarget): after every
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
func keepUnchanged(m *mapping.Mapping, next, prev *change.Row) error {
	if prev.Deleted {
		return &change.RecordError{Record: next.Record, Offset: -1, Key: change.RenderKey(m, next.Vals), LSN: next.Version, Column: firstUnchanged(m, next),
			Err: fmt.Errorf("%w: the update leaves the column unchanged, but the key's previous event (record %d) is a delete",
				change.ErrToastAfterDelete, prev.Record)}
	}
	next.Unchanged = false
	for i := range next.Vals {
		if !next.Vals[i].Toast {
			continue
		}
		v := prev.Vals[i]
		from := prev.Version
		if v.Filled {
			from = prev.FilledFrom
		}
		if v.Toast {
			next.Unchanged = true
		} else {
			v.Filled = true
			if next.FilledFrom == 0 || from < next.FilledFrom {
				next.FilledFrom = from
			}
		}
		next.Vals[i] = v
	}
	return nil
}

// StaleFills returns the rows the batch filled placeholders of from an
// event older than the target's current row of the key, itself older than
// the row: the target's row is the previous version, not the batch's
// event. A target row at the row's own version (a replay) is one an
// earlier run filled so: its values are taken again too.
func StaleFills(rows []*change.Row, cur map[string]*change.Row) []*change.Row {
	var stale []*change.Row
	for _, r := range rows {
		c := cur[r.Key]
		if r.FilledFrom == 0 || c == nil || c.Version <= r.FilledFrom {
			continue
		}
		if c.Version < r.Version || (c.Version == r.Version && !c.Deleted) {
			stale = append(stale, r)
		}
	}
	return stale
}

// Refill takes the filled values of stale (StaleFills) again from cur, the
// target's rows of those keys, read under the same lock; a target row that
// is a delete is refused: the previous version of the value is gone.
func Refill(m *mapping.Mapping, stale []*change.Row, cur map[string]*change.Row) error {
	for _, r := range stale {
		c := cur[r.Key]
		why := ""
		switch {
		case c == nil:
			why = "the target's row of the key vanished while the batch ran (another writer?)"
		case c.Deleted:
			why = fmt.Sprintf("the target holds the key deleted at version %d, between the batch's event it was filled from (version %d) and this one",
				c.Version, r.FilledFrom)
		}
		if why != "" {
			return outcome.Refused.Mark(&change.RecordError{Record: r.Record, Offset: -1, Key: change.RenderKey(m, r.Vals), LSN: r.Version, Column: firstFilled(m, r),
				Err: fmt.Errorf("%w: the update leaves the column unchanged, and %s", change.ErrToast, why)})
		}
		for i := range r.Vals {
			if r.Vals[i].Filled {
				v := c.Vals[i]
				v.Filled = true
				r.Vals[i] = v
			}
		}
		r.FilledFrom = c.Version
	}
	return nil
}

func firstFilled(m *mapping.Mapping, r *change.Row) string {
	for i := range r.Vals {
		if r.Vals[i].Filled {
			return m.Cols[i].Name
		}
	}
	return ""
}

// sameEvent is samePayload for two events of one key and LSN (one WAL
// record): a placeholder and the value an earlier copy of the event was
// given for it are the same.
func sameEvent(a, b *change.Row) bool {
	if !a.Unchanged && !b.Unchanged {
		return change.SamePayload(a, b)
	}
	if a.Version != b.Version || a.Deleted != b.Deleted || len(a.Vals) != len(b.Vals) {
		return false
	}
	for i := range a.Vals {
		x, y := a.Vals[i], b.Vals[i]
		if (x.Toast && (y.Toast || y.Filled)) || (y.Toast && x.Filled) {
			continue
		}
		if !x.Equal(y) {
			return false
		}
	}
	return true
}

// UnchangedRows returns the rows whose placeholders the batch could not
// fill (the key's first event in the batch left a column unchanged): the
// keys FillFromTarget needs the target's current rows of.
func UnchangedRows(rows []*change.Row) []*change.Row {
	var need []*change.Row
	for _, r := range rows {
		if r.Unchanged {
			need = append(need, r)
		}
	}
	return need
}

// FillFromTarget fills the placeholders of need (UnchangedRows) from cur,
// the target's current row of each such key; see the rules above. trunc
// is the batch's latest TRUNCATE (nil: none): a target row older than it
// is gone.
func FillFromTarget(m *mapping.Mapping, need []*change.Row, cur map[string]*change.Row, trunc *change.Row) (int, error) {
	filled := 0
	for _, r := range need {
		c := cur[r.Key]
		var why string
		switch {
		case c == nil:
			why = "the target does not hold the key"
		case c.Version > r.Version:
			continue // skipped: the target holds a newer version
		case c.Deleted:
			why = fmt.Sprintf("the target holds the key deleted (LSN %d)", c.Version)
		case trunc != nil && c.Version < trunc.Version:
			why = fmt.Sprintf("the TRUNCATE at record %d (LSN %d) removed the target's row", trunc.Record, trunc.Version)
		}
		if why != "" {
			return 0, outcome.Refused.Mark(&change.RecordError{Record: r.Record, Offset: -1, Key: change.RenderKey(m, r.Vals), LSN: r.Version, Column: firstUnchanged(m, r),
				Err: fmt.Errorf("%w: the update leaves the column unchanged, but neither the batch nor the target holds the previous version (%s)",
					change.ErrToast, why)})
		}
		for i := range r.Vals {
			if r.Vals[i].Toast {
				v := c.Vals[i]
				v.Filled = true
				r.Vals[i] = v
				filled++
			}
		}
		r.Unchanged = false
	}
	return filled, nil
}

// CheckFilled refuses, as an internal error, a row about to be written that
// still holds a placeholder: FillFromTarget leaves one only in keys the
// target holds newer, which are never pending.
func CheckFilled(m *mapping.Mapping, pending []*change.Row) error {
	for _, r := range pending {
		if r.Unchanged {
			return fmt.Errorf("internal error: key %s (record %d) would be written with an unknown TOAST value in column %q",
				change.RenderKey(m, r.Vals), r.Record, firstUnchanged(m, r))
		}
	}
	return nil
}

func firstUnchanged(m *mapping.Mapping, r *change.Row) string {
	for i := range r.Vals {
		if r.Vals[i].Toast {
			return m.Cols[i].Name
		}
	}
	return ""
}
