package cdc

import (
	"errors"
	"fmt"

	"github.com/amazon-ion/ion-go/ion"
)

// recordDecoder turns one Ion change event (the reader positioned on a
// top-level value) into a canonical row, applying the seed's prepare_batch
// checks generalised by the mapping, in the seed's order: unknown columns,
// the source table, the LSN, the key, the delete marker, then the values.
// It is not safe for concurrent use; each worker has its own.
type recordDecoder struct {
	m      *Mapping
	seen   []bool
	vals   []value
	errs   []error
	keyBuf []byte
}

func newRecordDecoder(m *Mapping) *recordDecoder {
	n := len(m.cols)
	return &recordDecoder{m: m, seen: make([]bool, n), vals: make([]value, n), errs: make([]error, n)}
}

// recordState collects what the walk of one event found.
type recordState struct {
	unknown      string // first field that is not a mapped column
	dupField     string // first repeated field
	deleted      bool
	deletedSet   bool
	deletedErr   error
	metaSet      bool
	metaErr      error
	sourceSet    bool
	db, schema   string
	table        string
	dbSet        bool
	schemaSet    bool
	tableSet     bool
	lsn          uint64
	lsnSet       bool
	lsnErr       error
	operation    string
	operationSet bool
}

// decode reads the event the reader is positioned on. rec is its 1-based
// record number. A refusal is a *RecordError wrapping a sentinel; it carries
// the key and LSN whenever they could be read.
func (d *recordDecoder) decode(r ion.Reader, rec int64) (row, error) {
	m := d.m
	fail := func(col string, err error) (row, error) {
		return row{}, &RecordError{Record: rec, Offset: -1, Column: col, Err: err}
	}
	if r.Type() != ion.StructType || r.IsNull() {
		return fail("", fmt.Errorf("%w: got %s", ErrNotStruct, describe(r)))
	}
	for i := range d.seen {
		d.seen[i], d.errs[i], d.vals[i] = false, nil, value{}
	}
	var st recordState
	if err := r.StepIn(); err != nil {
		return fail("", malformedValue(err))
	}
	for r.Next() {
		f, err := r.FieldName()
		if err != nil || f == nil || f.Text == nil {
			if err == nil {
				err = errors.New("a struct field without a name")
			}
			return fail("", malformedValue(err))
		}
		name := *f.Text
		switch name {
		case m.Source.DeletedField:
			if st.deletedSet {
				st.dupField = firstNonEmpty(st.dupField, name)
				continue
			}
			st.deletedSet = true
			if r.Type() != ion.BoolType || r.IsNull() {
				st.deletedErr = fmt.Errorf("%w: expected true or false, got %s", ErrBadDeleteMarker, describe(r))
				continue
			}
			b, err := r.BoolValue()
			if err != nil || b == nil {
				return fail(name, malformedValue(err))
			}
			st.deleted = *b
		case m.Source.MetadataField:
			if st.metaSet {
				st.dupField = firstNonEmpty(st.dupField, name)
				continue
			}
			st.metaSet = true
			if err := readMetadata(r, &st); err != nil {
				if errors.Is(err, ErrMalformed) {
					return fail(name, err)
				}
				st.metaErr = err
			}
		default:
			i, ok := m.byName[name]
			if !ok {
				if st.unknown == "" {
					st.unknown = name
				}
				continue
			}
			if d.seen[i] {
				st.dupField = firstNonEmpty(st.dupField, name)
				continue
			}
			d.seen[i] = true
			v, err := convert(r, &m.cols[i])
			if err != nil {
				if errors.Is(err, ErrMalformed) && !errors.Is(err, errNotUTF8) {
					return fail(name, err)
				}
				d.errs[i] = err
				continue
			}
			d.vals[i] = v
		}
	}
	if err := r.Err(); err != nil {
		return fail("", malformedValue(err))
	}
	if err := r.StepOut(); err != nil {
		return fail("", malformedValue(err))
	}

	// Refusals in the seed's order, each with the key and LSN when known.
	out := row{rec: rec, lsn: st.lsn, deleted: st.deleted}
	keyOK := true
	for _, i := range m.keyIdx {
		if !d.seen[i] || d.errs[i] != nil {
			keyOK = false
		}
	}
	refuse := func(col string, err error) (row, error) {
		e := &RecordError{Record: rec, Offset: -1, Column: col, Err: err}
		if st.lsnSet {
			e.LSN = st.lsn
		}
		if keyOK {
			e.Key = renderKey(m, d.vals)
		}
		return row{}, e
	}
	switch {
	case st.dupField != "":
		return refuse(st.dupField, fmt.Errorf("%w: field %q appears twice in one event", ErrMalformed, st.dupField))
	case st.unknown != "":
		return refuse(st.unknown, fmt.Errorf("%w: column %q is not in the mapping %s", ErrSourceChanged, st.unknown, m.File))
	case !st.metaSet:
		return refuse(m.Source.MetadataField, fmt.Errorf("%w: no %q field (set metadata: ADD_FIELD on the trigger)", ErrMissingField, m.Source.MetadataField))
	case st.metaErr != nil:
		return refuse(m.Source.MetadataField, st.metaErr)
	case !st.sourceSet:
		return refuse(m.Source.MetadataField+".source", fmt.Errorf("%w: no metadata.source struct", ErrMissingField))
	case !st.dbSet || !st.schemaSet || !st.tableSet || st.db != m.Source.Database || st.schema != m.Source.Schema || st.table != m.Source.Table:
		return refuse("", fmt.Errorf("%w: expected changes from %s.%s in database %s, got %s", ErrWrongSource,
			m.Source.Schema, m.Source.Table, m.Source.Database, sourceName(&st)))
	case st.lsnErr != nil:
		return refuse(m.Source.MetadataField+".source.lsn", st.lsnErr)
	case !st.lsnSet:
		return refuse(m.Source.MetadataField+".source.lsn", fmt.Errorf("%w: no metadata.source.lsn", ErrMissingField))
	case st.operationSet && st.operation == "TRUNCATE":
		return refuse("", ErrTruncate)
	}
	for _, i := range m.keyIdx {
		switch {
		case !d.seen[i]:
			return refuse(m.cols[i].name, fmt.Errorf("%w: key column %q is absent", ErrMissingField, m.cols[i].name))
		case d.errs[i] != nil:
			return refuse(m.cols[i].name, d.errs[i])
		}
	}
	if st.deletedErr != nil {
		return refuse(m.Source.DeletedField, st.deletedErr)
	}
	out.vals = make([]value, len(m.cols))
	for i := range m.cols {
		c := &m.cols[i]
		switch {
		case c.isKey:
			out.vals[i] = d.vals[i]
		case st.deleted:
			// A delete's before image may hold nulls or nothing but the key
			// (REPLICA IDENTITY DEFAULT); the seed writes zeros and "".
			out.vals[i] = zeroValue(c.typ)
		case !d.seen[i] && c.typ.nullable:
			// Kestra's trigger serializes events with NON_NULL inclusion:
			// a NULL column is left out of the record, not written as null.
			out.vals[i] = value{null: true}
		case !d.seen[i]:
			return refuse(c.name, fmt.Errorf("%w: column %q is absent: the source value was NULL (Kestra's Debezium trigger leaves NULL columns out of the record), but %s is not Nullable; make it Nullable(%s) in the mapping and the target table, or fix the source", ErrMissingField, c.name, m.Columns[i].Type, m.Columns[i].Type))
		case d.errs[i] != nil:
			return refuse(c.name, d.errs[i])
		default:
			out.vals[i] = d.vals[i]
		}
	}
	d.keyBuf = encodeKey(d.keyBuf[:0], m, out.vals)
	out.key = string(d.keyBuf)
	return out, nil
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func sourceName(st *recordState) string {
	show := func(set bool, s string) string {
		if !set {
			return "(none)"
		}
		return s
	}
	return fmt.Sprintf("%s.%s in database %s", show(st.schemaSet, st.schema), show(st.tableSet, st.table), show(st.dbSet, st.db))
}

// readMetadata walks the metadata struct: operation and source {db, schema,
// table, lsn}; other fields (timestamp, txId, snapshot, ...) are skipped.
func readMetadata(r ion.Reader, st *recordState) error {
	if r.Type() != ion.StructType || r.IsNull() {
		return fmt.Errorf("%w: metadata is %s, not a struct", ErrMissingField, describe(r))
	}
	if err := r.StepIn(); err != nil {
		return malformedValue(err)
	}
	for !(st.sourceSet && st.operationSet) && r.Next() {
		f, err := r.FieldName()
		if err != nil || f == nil || f.Text == nil {
			return malformedValue(err)
		}
		switch *f.Text {
		case "operation":
			st.operation, st.operationSet = textValue(r)
		case "source":
			if r.Type() != ion.StructType || r.IsNull() {
				continue
			}
			st.sourceSet = true
			if err := r.StepIn(); err != nil {
				return malformedValue(err)
			}
			// Stop at the last field needed: ion-go parses every scalar it
			// passes, and skips the rest of a struct on StepOut without
			// parsing it.
			for !(st.dbSet && st.schemaSet && st.tableSet && (st.lsnSet || st.lsnErr != nil)) && r.Next() {
				f, err := r.FieldName()
				if err != nil || f == nil || f.Text == nil {
					return malformedValue(err)
				}
				switch *f.Text {
				case "db":
					st.db, st.dbSet = textValue(r)
				case "schema":
					st.schema, st.schemaSet = textValue(r)
				case "table":
					st.table, st.tableSet = textValue(r)
				case "lsn":
					lsn, err := readLSN(r)
					if err != nil {
						if errors.Is(err, ErrMalformed) {
							return err
						}
						st.lsnErr = err
						continue
					}
					st.lsn, st.lsnSet = lsn, true
				}
			}
			if err := r.Err(); err != nil {
				return malformedValue(err)
			}
			if err := r.StepOut(); err != nil {
				return malformedValue(err)
			}
		}
	}
	if err := r.Err(); err != nil {
		return malformedValue(err)
	}
	if err := r.StepOut(); err != nil {
		return malformedValue(err)
	}
	return nil
}

// textValue returns a string or symbol's text; ok is false for anything else.
func textValue(r ion.Reader) (string, bool) {
	if r.IsNull() {
		return "", false
	}
	switch r.Type() {
	case ion.StringType:
		s, err := r.StringValue()
		if err == nil && s != nil {
			return *s, true
		}
	case ion.SymbolType:
		s, err := r.SymbolValue()
		if err == nil && s != nil && s.Text != nil {
			return *s.Text, true
		}
	}
	return "", false
}
