package cdc_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/amazon-ion/ion-go/ion"
	"gopkg.in/yaml.v3"

	"github.com/changesink/changesink/internal/testenv"
)

// The batches under testdata/debezium were written by real Debezium and Kestra's own FileSerde
// (harness/debezium, .ci/debezium fixtures). This test checks only that they are what the harness
// says they are: well-formed Ion in both forms, one version marker and local symbol table per binary
// record, the trigger's INLINE shape (columns in table order with NULLs omitted, then deleted, then
// metadata with its fixed fields), and the record counts and operations of each scenario's manifest.

const debeziumTestdata = "testdata/debezium"

// sourceFields is metadata.source in the order the trigger writes it.
var sourceFields = []string{"version", "connector", "name", "timestamp", "snapshot", "db", "table", "row",
	"source", "schema", "sequence", "lsn", "ts_us", "txId", "ts_ns"}

// metadataFields is metadata in the order the trigger writes it (a Java HashMap's order).
var metadataFields = []string{"source", "ts_ns", "operation", "ts_us", "timestamp"}

type debeziumManifest struct {
	Database    string `json:"database"`
	Table       string `json:"table"`
	Batches     int    `json:"batches"`
	Evaluations []struct {
		Records    int            `json:"records"`
		Operations map[string]int `json:"operations"`
		Batch      string         `json:"batch"`
		Error      []string       `json:"error"`
	} `json:"evaluations"`
}

// debeziumRecord is one decoded INLINE record: its top-level field names and Ion types in order, and
// what the checks need from metadata.
type debeziumRecord struct {
	fields    []string
	types     []ion.Type
	nulls     []string
	metadata  []string
	source    []string
	operation string
	db, table string
}

func TestDebeziumTestdataShape(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join(debeziumTestdata, "*", "manifest.json"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no scenarios under %s (run .ci/debezium fixtures): %v", debeziumTestdata, err)
	}
	for _, mf := range dirs {
		dir := filepath.Dir(mf)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			var m debeziumManifest
			readJSON(t, mf, &m)
			columns := mappingColumns(t, filepath.Join(dir, "mapping.yaml"))
			schema, table, _ := strings.Cut(m.Table, ".")
			batches := 0
			for _, ev := range m.Evaluations {
				if ev.Batch == "" {
					continue
				}
				batches++
				bin := testenv.ReadFile(t, filepath.Join(dir, ev.Batch+".binary.ion"))
				txt := testenv.ReadFile(t, filepath.Join(dir, ev.Batch+".text.ion"))
				checkBinaryChunks(t, ev.Batch, bin, ev.Records)
				checkTextLines(t, ev.Batch, txt, ev.Records)
				fromBin := decodeRecords(t, ev.Batch+".binary.ion", bin)
				fromTxt := decodeRecords(t, ev.Batch+".text.ion", txt)
				if len(fromBin) != ev.Records || len(fromTxt) != ev.Records {
					t.Fatalf("%s: %d binary and %d text records, manifest says %d", ev.Batch, len(fromBin), len(fromTxt), ev.Records)
				}
				ops := map[string]int{}
				for i, r := range fromBin {
					where := fmt.Sprintf("%s record %d", ev.Batch, i+1)
					checkInline(t, where, r, columns)
					if r.db != m.Database || r.table != table || schema != "public" {
						t.Errorf("%s: source %s.%s, manifest %s.%s", where, r.db, r.table, m.Database, m.Table)
					}
					ops[opCode(r.operation)]++
					tx := fromTxt[i]
					if !slices.Equal(r.fields, tx.fields) || !slices.Equal(r.types, tx.types) {
						t.Errorf("%s: text form differs from binary:\n binary %v %v\n text   %v %v", where, r.fields, r.types, tx.fields, tx.types)
					}
				}
				if fmt.Sprint(ops) != fmt.Sprint(ev.Operations) {
					t.Errorf("%s: operations %v, manifest %v", ev.Batch, ops, ev.Operations)
				}
			}
			if batches != m.Batches {
				t.Errorf("%d batches listed, manifest says %d", batches, m.Batches)
			}
		})
	}
}

// checkInline checks one record's INLINE shape: mapped columns only, in mapping (table) order, none
// null, then deleted (bool) and metadata with the trigger's fields in the trigger's order.
func checkInline(t *testing.T, where string, r debeziumRecord, columns []string) {
	t.Helper()
	n := len(r.fields)
	if n < 2 || r.fields[n-2] != "deleted" || r.fields[n-1] != "metadata" {
		t.Errorf("%s: fields %v do not end with deleted, metadata", where, r.fields)
		return
	}
	if r.types[n-2] != ion.BoolType || r.types[n-1] != ion.StructType {
		t.Errorf("%s: deleted is %v and metadata %v", where, r.types[n-2], r.types[n-1])
	}
	last := -1
	for _, f := range r.fields[:n-2] {
		i := slices.Index(columns, f)
		if i < 0 {
			t.Errorf("%s: field %q is not a column of the mapping", where, f)
		} else if i <= last {
			t.Errorf("%s: fields %v are not in table order %v", where, r.fields, columns)
		}
		last = max(last, i)
	}
	if len(r.nulls) > 0 {
		t.Errorf("%s: null columns %v are written; the trigger omits them", where, r.nulls)
	}
	if !slices.Equal(r.metadata, metadataFields) {
		t.Errorf("%s: metadata fields %v, want %v", where, r.metadata, metadataFields)
	}
	if !slices.Equal(r.source, sourceFields) {
		t.Errorf("%s: metadata.source fields %v, want %v", where, r.source, sourceFields)
	}
}

// checkBinaryChunks walks the top-level values of a binary batch: every record must be a version
// marker, a local symbol table and one struct, as one FileSerde.write per record produces.
func checkBinaryChunks(t *testing.T, name string, data []byte, records int) {
	t.Helper()
	var kinds []string
	for off := 0; off < len(data); {
		if bytes.HasPrefix(data[off:], []byte{0xE0, 0x01, 0x00, 0xEA}) {
			kinds = append(kinds, "bvm")
			off += 4
			continue
		}
		td := data[off]
		typ, l := td>>4, td&0x0F
		n, hdr := int(l), 1
		switch {
		case typ == 1 || l == 15: // bool or null: no body
			n = 0
		case l == 14 || (typ == 0xD && l == 1):
			v, w, err := varUInt(data[off+1:])
			if err != nil {
				t.Fatalf("%s: bad length at byte %d: %v", name, off, err)
			}
			n, hdr = v, 1+w
		}
		switch typ {
		case 0xE:
			kinds = append(kinds, "annotated") // a symbol table ($ion_symbol_table::{...})
		case 0xD:
			kinds = append(kinds, "struct")
		default:
			kinds = append(kinds, fmt.Sprintf("type%x", typ))
		}
		off += hdr + n
		if off > len(data) {
			t.Fatalf("%s: value at the end runs past the file", name)
		}
	}
	want := slices.Repeat([]string{"bvm", "annotated", "struct"}, records)
	if !slices.Equal(kinds, want) {
		t.Errorf("%s: top-level layout %v, want a version marker, a symbol table and a struct per record (%d records)", name, kinds, records)
	}
}

// checkTextLines: the Kestra 1.x form is one value per line, without a version marker.
func checkTextLines(t *testing.T, name string, data []byte, records int) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(lines) != records {
		t.Errorf("%s: %d lines, want %d (one record per line)", name, len(lines), records)
	}
	for i, l := range lines {
		if !strings.HasPrefix(l, "{") || !strings.HasSuffix(l, "}") {
			t.Errorf("%s line %d is not one struct: %.80s", name, i+1, l)
		}
	}
}

func decodeRecords(t *testing.T, name string, data []byte) []debeziumRecord {
	t.Helper()
	r := ion.NewReader(bufio.NewReader(bytes.NewReader(data)))
	var out []debeziumRecord
	for r.Next() {
		if r.Type() != ion.StructType {
			t.Fatalf("%s: top-level %v, want struct", name, r.Type())
		}
		rec, err := readRecord(r)
		if err != nil {
			t.Fatalf("%s record %d: %v", name, len(out)+1, err)
		}
		out = append(out, rec)
	}
	if err := r.Err(); err != nil {
		t.Fatalf("%s: malformed Ion after %d records: %v", name, len(out), err)
	}
	return out
}

func readRecord(r ion.Reader) (debeziumRecord, error) {
	var rec debeziumRecord
	err := eachField(r, func(name string) error {
		rec.fields = append(rec.fields, name)
		rec.types = append(rec.types, r.Type())
		if r.IsNull() {
			rec.nulls = append(rec.nulls, name)
		}
		if name == "metadata" && r.Type() == ion.StructType {
			return readMetadata(r, &rec)
		}
		return nil
	})
	return rec, err
}

func readMetadata(r ion.Reader, rec *debeziumRecord) error {
	return eachField(r, func(name string) error {
		rec.metadata = append(rec.metadata, name)
		switch {
		case name == "operation":
			s, err := r.StringValue()
			if err != nil || s == nil {
				return fmt.Errorf("metadata.operation: %v", err)
			}
			rec.operation = *s
		case name == "source" && r.Type() == ion.StructType:
			return eachField(r, func(f string) error {
				rec.source = append(rec.source, f)
				if (f == "db" || f == "table") && r.Type() == ion.StringType {
					s, _ := r.StringValue()
					if f == "db" {
						rec.db = *s
					} else {
						rec.table = *s
					}
				}
				return nil
			})
		}
		return nil
	})
}

// eachField steps into the struct at r and calls field with each field's
// name, r on its value.
func eachField(r ion.Reader, field func(name string) error) error {
	if err := r.StepIn(); err != nil {
		return err
	}
	for r.Next() {
		name, err := fieldName(r)
		if err != nil {
			return err
		}
		if err := field(name); err != nil {
			return err
		}
	}
	if err := r.Err(); err != nil {
		return err
	}
	return r.StepOut()
}

func fieldName(r ion.Reader) (string, error) {
	tok, err := r.FieldName()
	if err != nil || tok == nil || tok.Text == nil {
		return "", fmt.Errorf("field without a name: %v", err)
	}
	return *tok.Text, nil
}

// opCode maps the operation names to Debezium's codes, as the manifest counts them.
func opCode(op string) string {
	return map[string]string{"READ": "r", "CREATE": "c", "UPDATE": "u", "DELETE": "d", "TRUNCATE": "t"}[op]
}

func varUInt(b []byte) (int, int, error) {
	v := 0
	for i := 0; i < len(b) && i < 8; i++ {
		v = v<<7 | int(b[i]&0x7F)
		if b[i]&0x80 != 0 {
			return v, i + 1, nil
		}
	}
	return 0, 0, errors.New("unterminated VarUInt")
}

func mappingColumns(t *testing.T, path string) []string {
	t.Helper()
	var m struct {
		Columns []struct {
			Name string `yaml:"name"`
		} `yaml:"columns"`
	}
	if err := yaml.Unmarshal(testenv.ReadFile(t, path), &m); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var cols []string
	for _, c := range m.Columns {
		cols = append(cols, c.Name)
	}
	return cols
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	if err := json.Unmarshal(testenv.ReadFile(t, path), v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
