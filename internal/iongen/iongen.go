// Package iongen writes Debezium INLINE change events as Kestra writes
// them, for cdc's tests and benchmark: text Ion with one value per line
// (Kestra 1.x FileSerde) or binary Ion with one version-marked chunk per
// row (Kestra 2.x). Events are built from a small value vocabulary so a
// test can state any shape the trigger produces, and wrong ones.
package iongen

import (
	"bytes"
	"fmt"
	"io"
	"math/big"
	"time"

	"github.com/amazon-ion/ion-go/ion"
)

// Field is one struct field; fields keep their order. It is an alias of an
// unnamed struct so tests can write {"id", 42}.
type Field = struct {
	Name  string
	Value any
}

// Struct is an Ion struct. Values may be: nil (null), Null (a typed null),
// bool, int, int64, uint64, *big.Int, float64, Decimal, string, Symbol,
// Blob, Timestamp, Annotated, Struct, List.
type Struct []Field

// List is an Ion list.
type List []any

// Decimal is an Ion decimal in text form, such as "12.50".
type Decimal string

// Symbol is an Ion symbol.
type Symbol string

// Blob is an Ion blob.
type Blob []byte

// Null is a typed null such as null.string (ion.StringType).
type Null ion.Type

// Annotated is a value with one annotation, as Kestra writes java.time
// values: ZonedDateTime::"2024-01-15T10:30:00.123456Z". An alias of an
// unnamed struct, like Field.
type Annotated = struct {
	Annotation string
	Value      any
}

// Timestamp is an Ion timestamp.
type Timestamp struct {
	Time      time.Time
	Precision ion.TimestampPrecision
	// Fraction is the number of fractional-second digits (Nanosecond precision).
	Fraction uint8
}

// Millis is a timestamp as Kestra writes an Instant: UTC, 3 fraction digits.
func Millis(t time.Time) Timestamp {
	return Timestamp{Time: t.UTC(), Precision: ion.TimestampPrecisionNanosecond, Fraction: 3}
}

// Day is a day-precision timestamp, as Kestra writes a LocalDate.
func Day(y int, m time.Month, d int) Timestamp {
	return Timestamp{Time: time.Date(y, m, d, 0, 0, 0, 0, time.UTC), Precision: ion.TimestampPrecisionDay}
}

// Writer writes events to a batch file in one of Kestra's two forms.
type Writer struct {
	w      io.Writer
	binary bool
	buf    bytes.Buffer
}

// NewWriter returns a Writer; binary selects Kestra 2.x's form.
func NewWriter(w io.Writer, binary bool) *Writer { return &Writer{w: w, binary: binary} }

// Write writes one event: in text, the value and a newline; in binary, a
// version marker, a local symbol table and the value.
func (g *Writer) Write(v any) error {
	g.buf.Reset()
	var w ion.Writer
	if g.binary {
		w = ion.NewBinaryWriter(&g.buf)
	} else {
		w = ion.NewTextWriterOpts(&g.buf, ion.TextWriterQuietFinish)
	}
	if err := writeValue(w, v); err != nil {
		return err
	}
	if err := w.Finish(); err != nil {
		return err
	}
	if !g.binary {
		g.buf.WriteByte('\n')
	}
	_, err := g.w.Write(g.buf.Bytes())
	return err
}

// Raw writes bytes as they are (for garbled input).
func (g *Writer) Raw(b []byte) error {
	_, err := g.w.Write(b)
	return err
}

func writeValue(w ion.Writer, v any) error {
	switch x := v.(type) {
	case nil:
		return w.WriteNull()
	case Null:
		return w.WriteNullType(ion.Type(x))
	case bool:
		return w.WriteBool(x)
	case int:
		return w.WriteInt(int64(x))
	case int64:
		return w.WriteInt(x)
	case uint64:
		return w.WriteUint(x)
	case *big.Int:
		return w.WriteBigInt(x)
	case float64:
		return w.WriteFloat(x)
	case Decimal:
		d, err := ion.ParseDecimal(string(x))
		if err != nil {
			return err
		}
		return w.WriteDecimal(d)
	case string:
		return w.WriteString(x)
	case Symbol:
		return w.WriteSymbolFromString(string(x))
	case Blob:
		return w.WriteBlob(x)
	case Timestamp:
		var ts ion.Timestamp
		if x.Precision == ion.TimestampPrecisionNanosecond {
			ts = ion.NewTimestampWithFractionalSeconds(x.Time, x.Precision, ion.TimezoneUTC, x.Fraction)
		} else if x.Precision <= ion.TimestampPrecisionDay {
			ts = ion.NewDateTimestamp(x.Time, x.Precision)
		} else {
			ts = ion.NewTimestamp(x.Time, x.Precision, ion.TimezoneUTC)
		}
		return w.WriteTimestamp(ts)
	case Annotated:
		if err := w.Annotation(ion.NewSymbolTokenFromString(x.Annotation)); err != nil {
			return err
		}
		return writeValue(w, x.Value)
	case Struct:
		if err := w.BeginStruct(); err != nil {
			return err
		}
		for _, f := range x {
			if err := w.FieldName(ion.NewSymbolTokenFromString(f.Name)); err != nil {
				return err
			}
			if err := writeValue(w, f.Value); err != nil {
				return fmt.Errorf("field %s: %w", f.Name, err)
			}
		}
		return w.EndStruct()
	case List:
		if err := w.BeginList(); err != nil {
			return err
		}
		for _, e := range x {
			if err := writeValue(w, e); err != nil {
				return err
			}
		}
		return w.EndList()
	}
	return fmt.Errorf("iongen: unsupported value %T", v)
}

// Source is metadata.source as Kestra's Debezium trigger writes it for
// PostgreSQL, in the order Jackson serializes Message.Source (the inherited
// source field, the declared fields, then the connector's extra fields in
// their HashMap's order), derived from the plugin's code.
func Source(db, schema, table string, lsn any, txID int64, snapshot string) Struct {
	return Struct{
		{"source", nil}, {"version", "3.2.1.Final"}, {"connector", "postgresql"}, {"name", "kestra_"},
		{"timestamp", Millis(time.Date(2024, 1, 15, 10, 30, 1, 0, time.UTC))},
		{"snapshot", snapshot}, {"db", db}, {"table", table}, {"row", nil},
		{"schema", schema}, {"sequence", fmt.Sprintf(`[null,"%v"]`, lsn)}, {"xmin", nil}, {"lsn", lsn},
		{"ts_us", int64(1705314601000000)}, {"txId", txID}, {"ts_ns", int64(1705314601000000000)},
	}
}

// Metadata is the metadata struct (a HashMap: ts_us, source, ts_ns,
// operation, timestamp is its iteration order for these keys; readers must
// not rely on it).
func Metadata(operation string, source Struct) Struct {
	return Struct{
		{"ts_us", int64(1705314601001000)},
		{"source", source},
		{"ts_ns", int64(1705314601001000000)},
		{"operation", operation},
		{"timestamp", Millis(time.Date(2024, 1, 15, 10, 30, 1, 1_000_000, time.UTC))},
	}
}

// Event is an INLINE event: the row image, then deleted and metadata.
func Event(row Struct, deleted bool, metadata Struct) Struct {
	out := append(Struct{}, row...)
	return append(out, Field{"deleted", deleted}, Field{"metadata", metadata})
}

// TriggerSource is metadata.source as the Kestra 2.0 trigger writes it with
// Debezium 3.6.1 (harness/debezium/FINDINGS.md §1): version,
// connector, name, timestamp, snapshot, db, table, row, source, schema,
// sequence (a JSON array of LSN strings), lsn, ts_us, txId, ts_ns; xmin and
// origin are left out (NULL, NON_NULL inclusion). Its lsn_commit is
// lsn-56: a caller writing several events of one transaction gives them one
// (Debezium does; cdc refuses two in a transaction).
func TriggerSource(db, schema, table string, lsn, txID int64, snapshot string) Struct {
	return Struct{
		{"version", "3.6.1.Final"}, {"connector", "postgresql"}, {"name", "kestra_5f3a9c21"},
		{"timestamp", Millis(time.Date(2026, 12, 1, 8, 11, 12, 0, time.UTC))},
		{"snapshot", snapshot}, {"db", db}, {"table", table}, {"row", nil}, {"source", nil},
		{"schema", schema}, {"sequence", fmt.Sprintf(`["%d","%d"]`, lsn-56, lsn)}, {"lsn", lsn},
		{"ts_us", int64(1796112672345678)}, {"txId", txID}, {"ts_ns", int64(1796112672345678000)},
	}
}

// TriggerMetadata is the metadata struct in the order the Kestra 2.0
// trigger writes it: source, ts_ns, operation, ts_us, timestamp.
func TriggerMetadata(operation string, source Struct) Struct {
	return Struct{
		{"source", source},
		{"ts_ns", int64(1796112672401000000)},
		{"operation", operation},
		{"ts_us", int64(1796112672401000)},
		{"timestamp", Millis(time.Date(2026, 12, 1, 8, 11, 12, 401_000_000, time.UTC))},
	}
}

// TriggerEvent is an INLINE event as the Kestra 2.0 trigger writes it: the
// row's columns with NULL ones left out (NON_NULL inclusion), deleted,
// metadata.
func TriggerEvent(row Struct, deleted bool, metadata Struct) Struct {
	out := Struct{}
	for _, f := range row {
		if f.Value != nil {
			out = append(out, f)
		}
	}
	return append(out, Field{"deleted", deleted}, Field{"metadata", metadata})
}
