package slotsync

import (
	"fmt"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/pgvalue"
	"github.com/changesink/changesink/tasks/cdc/slot"
)

// decoders reads the relation rel in effect: a decoder for each of its
// columns the mapping maps, and the mapped columns it lacks (a column
// dropped at the source: NULL from then on). The relation's columns are
// checked against the mapping first (schema.go).
func (t *syncTable) decoders(rel *slot.Relation) error {
	t.decs, t.at = make([]*pgvalue.Decoder, len(rel.Columns)), make([]int, len(rel.Columns))
	for i, c := range rel.Columns {
		j, ok := t.m.ByName[c.Name]
		if !ok {
			t.at[i] = -1
			continue
		}
		d, err := pgvalue.NewDecoder(t.sourceColumn(c), &t.m.Cols[j])
		if err != nil {
			return outcome.Config.Mark(fmt.Errorf("table %s: %w", t.name(), err))
		}
		t.decs[i], t.at[i] = d, j
	}
	t.rel, t.keyless = rel, false
	return nil
}

// decodersBelow reads the relation rel of a change below the table's load
// point (belowLoad: only deletes and old keys are read there), leniently:
// a column the mapping cannot read from rel's type (the definition of
// before a change the resync took in) is left out; keyless is set when a
// key column is, and such changes are skipped (the load holds their
// outcome).
func (t *syncTable) decodersBelow(rel *slot.Relation) {
	t.decs, t.at = make([]*pgvalue.Decoder, len(rel.Columns)), make([]int, len(rel.Columns))
	found := 0
	for i, c := range rel.Columns {
		t.at[i] = -1
		j, ok := t.m.ByName[c.Name]
		if !ok {
			continue
		}
		d, err := pgvalue.NewDecoder(t.sourceColumn(c), &t.m.Cols[j])
		if err != nil {
			continue
		}
		t.decs[i], t.at[i] = d, j
		if t.m.Cols[j].IsKey {
			found++
		}
	}
	t.keyless = found < len(t.m.KeyIdx)
	t.rel = rel
}

// sourceColumn is the relation column c as pgvalue reads it: the
// catalog's NOT NULL and key flags, and its type's name, where the catalog
// knows the column.
func (t *syncTable) sourceColumn(c slot.Column) pgvalue.Column {
	for _, s := range t.src.cols {
		if s.Name == c.Name && s.TypeOID == c.TypeOID {
			s.TypeMod = c.TypeMod
			return s
		}
	}
	return pgvalue.Column{Name: c.Name, TypeOID: c.TypeOID, TypeMod: c.TypeMod, Key: c.Key}
}

// read reads one tuple into a row of the open transaction (readRow).
func (t *syncTable) read(tup slot.Tuple, op string, image bool, lsn uint64) error {
	row, err := t.readRow(tup, op, image, false, lsn)
	if err != nil {
		return err
	}
	t.open = append(t.open, row)
	return nil
}

// readRow reads one tuple into a row: op is its operation, image whether a
// delete's tuple holds the whole old row (REPLICA IDENTITY FULL), moved
// whether it is the new row of an update that changed the key (its
// unchanged TOAST values are the old key's), lsn the change's position. A
// delete that holds only the key has the seed's zeros in its other columns.
func (t *syncTable) readRow(tup slot.Tuple, op string, image, moved bool, lsn uint64) (change.Row, error) {
	m := t.m
	vals := make([]change.Value, len(m.Cols))
	for j := range m.Cols {
		if m.Cols[j].Type.Nullable {
			vals[j] = change.Value{Null: true} // a mapped column the relation lacks
		} else {
			vals[j] = change.Zero(m.Cols[j].Type)
		}
	}
	got := make([]bool, len(m.Cols)) // decoded from the tuple, for a refusal's key
	keyOnly := op == change.OpDelete && !image
	row := change.Row{Deleted: op == change.OpDelete, Meta: change.Meta{Op: op, LSN: lsn, Image: image, DeletedSet: true}}
	for i, v := range tup.Values {
		j := t.at[i]
		if j < 0 || (keyOnly && !m.Cols[j].IsKey) {
			continue
		}
		val, err := t.decs[i].Value(v.Kind, v.Data)
		if err != nil {
			return row, t.refuse(vals, got, lsn, m.Cols[j].Name, err)
		}
		if val.Toast {
			if m.Cols[j].IsKey || (op != change.OpUpdate && !moved) {
				return row, t.refuse(vals, got, lsn, m.Cols[j].Name, fmt.Errorf("%w: %s with an unchanged TOAST value", change.ErrToast, op))
			}
			row.Unchanged = true
		}
		vals[j], got[j] = val, true
	}
	if !keyOnly {
		for j := range m.Cols {
			if !m.Cols[j].Type.Nullable && !t.has(j) {
				return row, t.refuse(vals, got, lsn, m.Cols[j].Name, fmt.Errorf("%w: the source no longer has column %q, which is not Nullable in the target",
					change.ErrSchemaChange, m.Cols[j].Name))
			}
		}
	}
	row.Key = string(change.EncodeKey(nil, m, vals))
	row.Vals = vals
	return row, nil
}

// has reports whether the relation in effect has mapped column j.
func (t *syncTable) has(j int) bool {
	for _, at := range t.at {
		if at == j {
			return true
		}
	}
	return false
}

// keyOf is the key of a tuple (old or new image), encoded.
func (t *syncTable) keyOf(tup slot.Tuple) (string, error) {
	vals := make([]change.Value, len(t.m.Cols))
	got := make([]bool, len(t.m.Cols))
	for i, v := range tup.Values {
		j := t.at[i]
		if j < 0 || !t.m.Cols[j].IsKey {
			continue
		}
		val, err := t.decs[i].Value(v.Kind, v.Data)
		if err != nil {
			return "", t.refuse(vals, got, 0, t.m.Cols[j].Name, err)
		}
		vals[j], got[j] = val, true
	}
	return string(change.EncodeKey(nil, t.m, vals)), nil
}

// refuse locates a value's refusal: the table, the key where it is known,
// the LSN and the column.
func (t *syncTable) refuse(vals []change.Value, got []bool, lsn uint64, column string, err error) error {
	e := &change.RecordError{Offset: -1, LSN: lsn, Column: column, Err: err, Streamed: true}
	known := true
	for _, i := range t.m.KeyIdx {
		known = known && got[i]
	}
	if known {
		e.Key = change.RenderKey(t.m, vals)
	}
	return outcome.Refused.Mark(fmt.Errorf("table %s: %w", t.name(), e))
}
