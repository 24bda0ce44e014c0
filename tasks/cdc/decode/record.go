package decode

import (
	"errors"
	"fmt"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"

	"github.com/amazon-ion/ion-go/ion"

	"github.com/changesink/changesink/tasks/cdc/internal/ionrec"
)

// A change event's path: the batch's bytes are read into a record (by
// ionrec for the shapes Kestra writes, by ion-go for anything else), the
// record is checked in the seed's order (finish), each column's scalar is
// read, checked and encoded by its column type (convert, column.go), and
// the result is a row.

// The fields of metadata and metadata.source a record keeps, by slot.
const (
	metaOperation = iota
	metaSource
)

const (
	srcDB = iota
	srcSchema
	srcTable
	srcLSN
	srcSnapshot
	srcSequence
	srcTxID
)

var (
	metaFields   = []string{metaOperation: "operation", metaSource: "source"}
	sourceFields = []string{srcDB: "db", srcSchema: "schema", srcTable: "table", srcLSN: "lsn",
		srcSnapshot: "snapshot", srcSequence: "sequence", srcTxID: "txId"}
)

// shapeOf is the record shape of m's events: the mapped columns, then the
// delete marker and the metadata struct, whose operation and source
// {db, schema, table, lsn, snapshot, sequence, txId} are kept.
func shapeOf(m *mapping.Mapping) ionrec.Shape {
	top := make([]string, 0, len(m.Cols)+2)
	for i := range m.Cols {
		top = append(top, m.Cols[i].Name)
	}
	top = append(top, m.Source.DeletedField, m.Source.MetadataField)
	return ionrec.Shape{Fields: [3][]string{top, metaFields, sourceFields}, Nest: [2]int{len(m.Cols) + 1, metaSource}}
}

// record is one change event as read, before any check: each mapped
// column, the delete marker and the kept metadata fields as a scalar
// (absent: ion.NoType).
type record struct {
	ionrec.Record
	// dup is the first field that appears twice (ion-go's path; ionrec
	// hands such records to it).
	dup string
	// errs holds, per column, why a value ion-go read cannot be taken by
	// its column before any check ran (a bad {scale, value} struct).
	errs []error
}

func newRecord(m *mapping.Mapping, shape *ionrec.Shape) *record {
	return &record{Record: *ionrec.NewRecord(shape), errs: make([]error, len(m.Cols))}
}

func (r *record) reset() {
	r.Reset()
	r.dup = ""
	clear(r.errs)
}

func (r *record) col(i int) *ionrec.Scalar                  { return &r.Fields[0][i] }
func (r *record) deleted(m *mapping.Mapping) *ionrec.Scalar { return &r.Fields[0][len(m.Cols)] }
func (r *record) meta(m *mapping.Mapping) *ionrec.Scalar    { return &r.Fields[0][len(m.Cols)+1] }
func (r *record) metaField(i int) *ionrec.Scalar            { return &r.Fields[1][i] }
func (r *record) source(i int) *ionrec.Scalar               { return &r.Fields[2][i] }

// recordDecoder turns change events into canonical rows, applying the
// seed's prepare_batch checks generalised by the mapping. It is not safe
// for concurrent use; each worker has its own.
type recordDecoder struct {
	m     *mapping.Mapping
	shape ionrec.Shape
	// fast reads the shapes Kestra writes; nil reads every record with
	// ion-go (the oracle the differential tests compare against).
	fast   *ionrec.Reader
	rec    *record
	keyBuf []byte
	sumBuf []byte // eventSum's scratch
	// fallbacks counts the runs of records the fast reader left to ion-go.
	fallbacks int
	// slab is where rows' values come from, a thousand rows at a time (a
	// batch keeps a copy of the rows it keeps).
	slab []change.Value
}

// newVals returns a zeroed slice of one row's values.
func (d *recordDecoder) newVals() []change.Value {
	n := len(d.m.Cols)
	if len(d.slab) < n {
		d.slab = make([]change.Value, 1024*n)
	}
	vals := d.slab[:n:n]
	d.slab = d.slab[n:]
	return vals
}

// newRecordDecoder returns a decoder that reads records with the fast
// reader (internal/ionrec), and with ion-go what that cannot read.
func newRecordDecoder(m *mapping.Mapping) *recordDecoder {
	d := newIonDecoder(m)
	d.fast = ionrec.NewReader(d.shape)
	return d
}

// newIonDecoder returns a decoder that reads every record with ion-go.
func newIonDecoder(m *mapping.Mapping) *recordDecoder {
	d := &recordDecoder{m: m, shape: shapeOf(m)}
	d.rec = newRecord(m, &d.shape)
	return d
}

// decode reads the event the ion-go reader is positioned on and checks it.
// rec is its 1-based record number. A refusal is a *RecordError wrapping a
// sentinel; it carries the key and LSN whenever they could be read.
func (d *recordDecoder) decode(r ion.Reader, rec int64) (change.Row, error) {
	if col, err := d.readIon(r, d.rec); err != nil {
		return change.Row{}, &change.RecordError{Record: rec, Offset: -1, Column: col, Err: err}
	}
	return d.finish(d.rec, rec)
}

// readIon reads the event the reader is on into rec: the mapped columns,
// the delete marker and metadata (readMetadata). Malformed input stops it
// at once (with the field at fault); other problems are left to finish.
func (d *recordDecoder) readIon(r ion.Reader, rec *record) (string, error) {
	m := d.m
	if r.Type() != ion.StructType || r.IsNull() {
		return "", fmt.Errorf("%w: got %s (each record is one struct: the row's columns, deleted and metadata)", change.ErrNotStruct, describeIon(r))
	}
	rec.reset()
	if err := r.StepIn(); err != nil {
		return "", malformedValue(err)
	}
	for r.Next() {
		f, err := r.FieldName()
		if err != nil || f == nil || f.Text == nil {
			if err == nil {
				err = errors.New("a struct field without a name")
			}
			return "", malformedValue(err)
		}
		name := *f.Text
		var slot *ionrec.Scalar
		i, isCol := m.ByName[name]
		switch {
		case name == m.Source.DeletedField:
			slot = rec.deleted(m)
		case name == m.Source.MetadataField:
			slot = rec.meta(m)
		case isCol:
			slot = rec.col(i)
		default:
			if rec.Unknown == "" {
				rec.Unknown = name
			}
			continue
		}
		if slot.Type != ion.NoType {
			if rec.dup == "" {
				rec.dup = name
			}
			continue
		}
		switch {
		case name == m.Source.MetadataField && r.Type() == ion.StructType && !r.IsNull():
			slot.Type = ion.StructType
			if err := readMetadata(r, rec, name); err != nil {
				return name, err
			}
		case isCol && r.Type() == ion.StructType && !r.IsNull() && m.Cols[i].TakesVarScale():
			coef, exp, err := readVariableScale(r)
			switch {
			case errors.Is(err, change.ErrMalformed):
				return name, err
			case err != nil:
				slot.Type, rec.errs[i] = ion.StructType, err
			default:
				slot.Type, slot.Big, slot.Exp = ion.StructType, coef, int32(exp)
			}
		default:
			if err := readScalar(r, slot); err != nil {
				return name, err
			}
		}
	}
	return "", endStruct(r)
}

// readMetadata walks the metadata struct (named name in the event) for
// operation and source, and source for the fields the record keeps. It
// reads them to the end: a kept field that appears twice is noted in
// rec.dup (the fast reader hands such records here), as a repeated column
// is; which of two LSNs to take cannot be told.
func readMetadata(r ion.Reader, rec *record, name string) error {
	if err := r.StepIn(); err != nil {
		return malformedValue(err)
	}
	op, src := rec.metaField(metaOperation), rec.metaField(metaSource)
	var seenOp, seenSrc bool
	for r.Next() {
		f, err := r.FieldName()
		if err != nil || f == nil || f.Text == nil {
			return malformedValue(err)
		}
		switch *f.Text {
		case "operation":
			if seenOp {
				rec.noteDup(name + ".operation")
				continue
			}
			seenOp = true
			*op = ionrec.Scalar{}
			if err := readScalar(r, op); err != nil {
				return err
			}
		case "source":
			if seenSrc {
				rec.noteDup(name + ".source")
				continue
			}
			seenSrc = true
			if r.Type() != ion.StructType || r.IsNull() {
				continue
			}
			src.Type = ion.StructType
			if err := readSource(r, rec, name+".source"); err != nil {
				return err
			}
		}
	}
	return endStruct(r)
}

func readSource(r ion.Reader, rec *record, name string) error {
	if err := r.StepIn(); err != nil {
		return malformedValue(err)
	}
	var seen [srcTxID + 1]bool
	for r.Next() {
		f, err := r.FieldName()
		if err != nil || f == nil || f.Text == nil {
			return malformedValue(err)
		}
		for i, field := range sourceFields {
			if *f.Text != field {
				continue
			}
			if seen[i] {
				rec.noteDup(name + "." + field)
				break
			}
			seen[i] = true
			s := rec.source(i)
			*s = ionrec.Scalar{}
			if err := readScalar(r, s); err != nil {
				return err
			}
		}
	}
	return endStruct(r)
}

// noteDup records the first field that appears twice.
func (r *record) noteDup(name string) {
	if r.dup == "" {
		r.dup = name
	}
}

// readScalar reads the value the reader is on into s as ionrec would
// (ionrec.ReadScalar); an ion-go error is malformed input.
func readScalar(r ion.Reader, s *ionrec.Scalar) error {
	if err := ionrec.ReadScalar(r, s); err != nil {
		return malformedValue(err)
	}
	return nil
}

// isText reports a string or a symbol with text.
func isText(s *ionrec.Scalar) bool {
	return !s.Null && !s.NoText && (s.Type == ion.StringType || s.Type == ion.SymbolType)
}

// textIs reports whether s is text equal to want.
func textIs(s *ionrec.Scalar, want string) bool { return isText(s) && string(s.Bytes) == want }

// finish checks the record in the seed's order (a repeated field, unknown
// columns, metadata, the source table, the LSN, a truncate, the key, the
// delete marker, then the values) and returns its row. rec is the record's
// 1-based number.
func (d *recordDecoder) finish(r *record, rec int64) (change.Row, error) {
	m := d.m
	vals := d.newVals()
	errs := r.errs
	keyOK := true
	for _, i := range m.KeyIdx {
		s := r.col(i)
		if s.Type != ion.NoType && errs[i] == nil {
			vals[i], errs[i] = convert(s, &m.Cols[i])
			if errs[i] == nil && vals[i].Toast {
				errs[i] = fmt.Errorf("%w: a key column cannot be left unchanged", change.ErrToast)
			}
		}
		if s.Type == ion.NoType || errs[i] != nil {
			keyOK = false
		}
	}
	lsnSet, lsn, lsnErr := false, uint64(0), error(nil)
	meta := r.meta(m)
	metaOK := meta.Type == ion.StructType && !meta.Null
	src := r.metaField(metaSource)
	sourceOK := metaOK && src.Type == ion.StructType && !src.Null
	if s := r.source(srcLSN); sourceOK && s.Type != ion.NoType {
		lsn, lsnErr = readLSN(s)
		lsnSet = lsnErr == nil
	}
	refuse := func(col string, err error) (change.Row, error) {
		e := &change.RecordError{Record: rec, Offset: -1, Column: col, Err: err}
		if lsnSet {
			e.LSN = lsn
		}
		if keyOK {
			e.Key = change.RenderKey(m, vals)
		}
		return change.Row{}, e
	}
	db, schema, table := r.source(srcDB), r.source(srcSchema), r.source(srcTable)
	switch {
	case r.dup != "":
		return refuse(r.dup, fmt.Errorf("%w: field %q appears twice in one event", change.ErrMalformed, r.dup))
	case r.Unknown != "" && meta.Type == ion.NoType:
		// Neither a known shape nor metadata: most likely another file.
		return refuse(m.Source.MetadataField, fmt.Errorf("%w: no %q field, and a field %q the mapping %s does not know",
			change.ErrNotTriggerBatch, m.Source.MetadataField, r.Unknown, m.File))
	case r.Unknown != "":
		return refuse(r.Unknown, fmt.Errorf("%w: column %q is not in the mapping %s", change.ErrSourceChanged, r.Unknown, m.File))
	case meta.Type == ion.NoType:
		return refuse(m.Source.MetadataField, fmt.Errorf("%w: no %q field", change.ErrNotTriggerBatch, m.Source.MetadataField))
	case !metaOK:
		return refuse(m.Source.MetadataField, fmt.Errorf("%w: metadata is %s, not a struct", change.ErrMissingField, describe(meta)))
	case !sourceOK:
		return refuse(m.Source.MetadataField+".source", fmt.Errorf("%w: no metadata.source struct", change.ErrMissingField))
	case !textIs(db, m.Source.Database) || !textIs(schema, m.Source.Schema) || !textIs(table, m.Source.Table):
		return refuse("", fmt.Errorf("%w: expected changes from %s.%s in database %s, got %s.%s in database %s", change.ErrWrongSource,
			m.Source.Schema, m.Source.Table, m.Source.Database, shown(schema), shown(table), shown(db)))
	case lsnErr != nil:
		return refuse(m.Source.MetadataField+".source.lsn", lsnErr)
	case !lsnSet:
		return refuse(m.Source.MetadataField+".source.lsn", fmt.Errorf("%w: no metadata.source.lsn", change.ErrMissingField))
	case textIs(r.metaField(metaOperation), change.OpTruncate):
		return d.truncateRow(r, rec, lsn, refuse)
	}
	for _, i := range m.KeyIdx {
		switch {
		case r.col(i).Type == ion.NoType:
			return refuse(m.Cols[i].Name, fmt.Errorf("%w: key column %q is absent", change.ErrMissingField, m.Cols[i].Name))
		case errs[i] != nil:
			return refuse(m.Cols[i].Name, errs[i])
		}
	}
	del := r.deleted(m)
	deleted := del.Type == ion.BoolType && !del.Null && del.Bool
	if del.Type != ion.NoType && (del.Type != ion.BoolType || del.Null) {
		return refuse(m.Source.DeletedField, fmt.Errorf("%w: expected true or false, got %s", change.ErrBadDeleteMarker, describe(del)))
	}
	if err := contradiction(m, r.metaField(metaOperation), deleted); err != nil {
		return refuse(m.Source.MetadataField+".operation", err)
	}
	ch, field, err := changeOf(r, del, lsn)
	if err != nil {
		return refuse(m.Source.MetadataField+field, err)
	}
	for i := range m.Cols {
		c := &m.Cols[i]
		s := r.col(i)
		switch {
		case c.IsKey:
		case deleted:
			// A delete's before image may hold nulls or nothing but the key
			// (REPLICA IDENTITY DEFAULT); the seed writes zeros and "".
			vals[i] = change.Zero(c.Type)
		case s.Type == ion.NoType && c.Type.Nullable:
			// Kestra's trigger serializes events with NON_NULL inclusion:
			// a NULL column is left out of the record, not written as null.
			vals[i] = change.Value{Null: true}
		case s.Type == ion.NoType:
			return refuse(c.Name, fmt.Errorf("%w: column %q is absent (a NULL, which the trigger leaves out), but %s is not Nullable",
				change.ErrNotNullable, c.Name, m.Columns[i].Type))
		case errs[i] != nil:
			return refuse(c.Name, errs[i])
		default:
			v, err := convert(s, c)
			if err != nil {
				return refuse(c.Name, err)
			}
			vals[i] = v
		}
	}
	// An update that leaves a TOASTed column unchanged carries Debezium's
	// placeholder; the value is the row's previous version's, which the
	// batch (batch.add) or the target (fillFromTarget) holds. A create or a
	// snapshot read has no previous version: refused, as the seed refuses.
	unchanged := false
	for i := range vals {
		if vals[i].Toast {
			if !textIs(r.metaField(metaOperation), "UPDATE") {
				return refuse(m.Cols[i].Name, change.ErrToast)
			}
			unchanged = true
		}
	}
	if deleted {
		// The before image, where it tells rows apart, is kept in vals until
		// the batch merges the row (markerOf); the row then holds the seed's
		// zeros.
		ch.Image = d.beforeImage(r, vals)
	}
	out := change.Row{Record: rec, Version: lsn, Deleted: deleted, Vals: vals, Meta: ch, Unchanged: unchanged}
	out.Meta.Sum, d.sumBuf = change.EventSum(d.sumBuf, &out)
	d.keyBuf = change.EncodeKey(d.keyBuf[:0], m, out.Vals)
	out.Key = string(d.keyBuf)
	return out, nil
}

// shown renders a metadata.source name for a refusal: its text, or (none).
func shown(s *ionrec.Scalar) string {
	if !isText(s) {
		return "(none)"
	}
	return string(s.Bytes)
}

func describe(s *ionrec.Scalar) string {
	if s.Null {
		return "null"
	}
	return "an Ion " + s.Type.String()
}

func describeIon(r ion.Reader) string {
	if r.IsNull() {
		return "null"
	}
	return "an Ion " + r.Type().String()
}

// changeOf keeps what the event says about its place in the source's
// history: metadata.operation, metadata.source.txId, its LSN and the
// sequence's lsn_commit, whether it carried the delete marker. A malformed
// txId (txIDOf) and a sequence that names another LSN (checkSequence) are
// refused; field names the one at fault, below the metadata field.
func changeOf(r *record, del *ionrec.Scalar, lsn uint64) (_ change.Meta, field string, _ error) {
	c := change.Meta{DeletedSet: del.Type != ion.NoType, LSN: lsn}
	tx, err := txIDOf(r.source(srcTxID))
	if err != nil {
		return c, ".source.txId", err
	}
	c.TxID, c.TxIDSet = tx.ID, tx.Set
	if s := r.metaField(metaOperation); isText(s) {
		c.Op = intern(s.Bytes)
	}
	if s := r.source(srcSnapshot); isText(s) {
		c.Snapshot = intern(s.Bytes)
	}
	if s := r.source(srcSequence); isText(s) {
		if commit, commitSet, seqLSN, seqLSNSet, ok := sequenceOf(string(s.Bytes)); ok {
			c.Commit, c.CommitSet, c.Sequenced = commit, commitSet, true
			if err := checkSequence(s.Bytes, lsn, commit, commitSet, seqLSN, seqLSNSet); err != nil {
				return c, ".source.sequence", err
			}
		}
	}
	return c, "", nil
}

// txIDOf reads metadata.source.txId: absent or null is a change without
// one; anything but an integer in 0..2^63-1 is refused, since read as no
// transaction id it would silently take the event out of its transaction's
// checks.
func txIDOf(s *ionrec.Scalar) (change.TxMark, error) {
	switch {
	case s.Type == ion.NoType || s.Null:
		return change.TxMark{}, nil
	case s.Type != ion.IntType:
		return change.TxMark{}, fmt.Errorf("%w: expected an Ion int, got %s", change.ErrBadTxID, describe(s))
	}
	n := intOf(s)
	u, ok := n.uint64()
	if !ok || u > 1<<63-1 {
		return change.TxMark{}, fmt.Errorf("%w: %s is outside 0..9223372036854775807", change.ErrBadTxID, change.ShortNumber(n.String()))
	}
	return change.TxMark{ID: int64(u), Set: true}, nil
}

// intern returns the common operation and snapshot words without
// allocating.
func intern(b []byte) string {
	for _, w := range [...]string{change.OpCreate, change.OpUpdate, change.OpDelete, change.OpRead, change.OpTruncate, "false", "true", "first", "last",
		"first_in_data_collection", "last_in_data_collection", "incremental"} {
		if string(b) == w {
			return w
		}
	}
	return string(b)
}

// needsIon reports a record the fast reader cannot finish: a Decimal
// column (or a numeric held as text) holding a struct that is not exactly
// Debezium's {scale, value} (ionrec keeps only that one), whose refusal
// readVariableScale words.
func (d *recordDecoder) needsIon(r *record) bool {
	for i := range d.m.Cols {
		if s := r.col(i); s.Type == ion.StructType && !s.Null && !s.VarScale && d.m.Cols[i].TakesVarScale() {
			return true
		}
	}
	return false
}

// contradiction refuses an event whose operation and delete marker
// disagree, or whose operation Debezium does not send. An absent
// operation leaves the marker to decide (a hand-made replay file; the seed
// reads only the marker).
func contradiction(m *mapping.Mapping, op *ionrec.Scalar, deleted bool) error {
	if op.Type == ion.NoType {
		return nil
	}
	if !isText(op) {
		return fmt.Errorf("%w: metadata.operation is %s, not a Debezium operation name (READ, CREATE, UPDATE, DELETE, TRUNCATE)", change.ErrContradiction, describe(op))
	}
	marker := m.Source.DeletedField
	switch name := string(op.Bytes); name {
	case change.OpDelete:
		if !deleted {
			return fmt.Errorf("%w: metadata.operation is DELETE but %q is not true (a delete applied as a live row would resurrect it)",
				change.ErrContradiction, marker)
		}
	case change.OpCreate, change.OpUpdate, change.OpRead:
		if deleted {
			return fmt.Errorf("%w: metadata.operation is %s but %q is true (a live row applied as a delete would lose it)",
				change.ErrContradiction, name, marker)
		}
	default:
		return fmt.Errorf("%w: metadata.operation %q is not one Debezium's PostgreSQL connector sends (READ, CREATE, UPDATE, DELETE, TRUNCATE)", change.ErrContradiction, name)
	}
	return nil
}

// truncateRow is a TRUNCATE event: no row columns, deleted true (or
// absent). Its row has no key; the batch deletes every key older than it
// (batch.go).
func (d *recordDecoder) truncateRow(r *record, rec int64, lsn uint64, refuse func(string, error) (change.Row, error)) (change.Row, error) {
	m := d.m
	for i := range m.Cols {
		if r.col(i).Type != ion.NoType {
			return refuse(m.Cols[i].Name, fmt.Errorf("%w: a TRUNCATE event with the row column %q (the trigger writes a TRUNCATE without columns)", change.ErrContradiction, m.Cols[i].Name))
		}
	}
	del := r.deleted(m)
	if del.Type != ion.NoType && (del.Type != ion.BoolType || del.Null || !del.Bool) {
		return refuse(m.Source.DeletedField, fmt.Errorf("%w: a TRUNCATE event whose %q is %s, not true", change.ErrContradiction, m.Source.DeletedField, describe(del)))
	}
	ch, field, err := changeOf(r, del, lsn)
	if err != nil {
		return refuse(m.Source.MetadataField+field, err)
	}
	return change.Row{Record: rec, Version: lsn, Deleted: true, Meta: ch}, nil
}

// beforeImage converts a delete's before image into vals (the key is
// there already) for telling rows apart, and reports whether it does: not
// when a column does not convert or is absent though not Nullable, nor
// when every column but the key holds its zero value or NULL (what REPLICA
// IDENTITY DEFAULT sends: nothing but the key is known). Columns it could
// not convert are left zero.
func (d *recordDecoder) beforeImage(r *record, vals []change.Value) bool {
	m := d.m
	informative, ok := false, true
	for i := range m.Cols {
		c := &m.Cols[i]
		s := r.col(i)
		switch {
		case c.IsKey:
		case s.Type == ion.NoType && c.Type.Nullable:
			vals[i] = change.Value{Null: true}
		case s.Type == ion.NoType || r.errs[i] != nil || (s.Null && !c.Type.Nullable):
			ok = false // a null where none may be: not converted (no error built per delete)
		default:
			v, err := convert(s, c)
			if err != nil {
				ok = false
				break
			}
			if v.Toast {
				ok = false // Debezium's placeholder: the value is not in the image
				break
			}
			vals[i] = v
			if !v.Null && !v.Equal(change.Zero(c.Type)) {
				informative = true
			}
		}
		if !ok {
			break
		}
	}
	if ok && informative {
		return true
	}
	for i := range m.Cols { // back to the seed's zeros, whichever reader decoded it
		if !m.Cols[i].IsKey {
			vals[i] = change.Zero(m.Cols[i].Type)
		}
	}
	return false
}

// endStruct ends a struct the reader stepped into: a reader error, or one
// stepping out, is malformed input.
func endStruct(r ion.Reader) error {
	if err := r.Err(); err != nil {
		return malformedValue(err)
	}
	if err := r.StepOut(); err != nil {
		return malformedValue(err)
	}
	return nil
}
