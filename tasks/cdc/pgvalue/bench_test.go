package pgvalue

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/changesink/changesink/tasks/cdc/change"
)

// benchCases are the values BenchmarkText converts, one per operation, with
// the pgtype value pgx's text decoder reads the same text into (the yardstick
// measured in the same run) and a value of the same shape: copying the
// bytes into a string is the least a string-valued column costs.
var benchCases = []struct {
	name, pg, col, text string
	oid                 uint32
	pgx                 func() any
}{
	{"bigint", "bigint", "Int64", "-9223372036854775808", pgtype.Int8OID, func() any { return new(int64) }},
	{"integer into Int32", "integer", "Int32", "2147483647", pgtype.Int4OID, func() any { return new(int32) }},
	{"numeric(12,2) into Decimal", "numeric(12,2)", "Decimal(12, 2)", "-9999999999.99", pgtype.NumericOID, func() any { return new(pgtype.Numeric) }},
	{"numeric into String", "numeric", "String|numeric", "1234567890123456789012345678.1234567890", pgtype.NumericOID, func() any { return new(pgtype.Numeric) }},
	{"double", "double precision", "Float64", "0.30000000000000004", pgtype.Float8OID, func() any { return new(float64) }},
	{"real", "real", "Float32", "3.4028235e+38", pgtype.Float4OID, func() any { return new(float32) }},
	{"boolean", "boolean", "Bool", "t", pgtype.BoolOID, func() any { return new(bool) }},
	{"text 16 bytes", "text", "String", "héllo wörld 16b", pgtype.TextOID, func() any { return new(string) }},
	{"text 200 bytes", "text", "String", strings.Repeat("abcdé", 40), pgtype.TextOID, func() any { return new(string) }},
	{"varchar(64) with max_length", "varchar(64)", "String||64", strings.Repeat("ab", 32), pgtype.TextOID, func() any { return new(string) }},
	{"uuid", "uuid", "UUID", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", pgtype.UUIDOID, func() any { return new(pgtype.UUID) }},
	{"date", "date", "Date", "2024-02-29", pgtype.DateOID, func() any { return new(pgtype.Date) }},
	{"timestamp", "timestamp", dt64, "2024-02-29 12:34:56.123456", pgtype.TimestampOID, func() any { return new(pgtype.Timestamp) }},
	{"timestamptz", "timestamptz", dt64, "2024-02-29 07:04:56.123456+00", pgtype.TimestamptzOID, func() any { return new(pgtype.Timestamptz) }},
	{"timestamptz into String", "timestamptz", "String|timestamptz", "2024-02-29 07:04:56.123456+05:30", pgtype.TimestamptzOID, func() any { return new(pgtype.Timestamptz) }},
	{"bytea 32 bytes", "bytea", "String", `\x` + strings.Repeat("00ff", 16), pgtype.ByteaOID, func() any { return new([]byte) }},
	{"jsonb", "jsonb", "String", `{"a": [1, 2.50, 100], "b": 1, "é": "ü"}`, pgtype.TextOID, func() any { return new(string) }},
}

// BenchmarkText: ns/op is the time of one value; pgvalue converts it,
// pgtype reads the same text with pgx's decoder (Map.Scan), copy makes a
// string of the bytes.
func BenchmarkText(b *testing.B) {
	cases := make([]textCase, len(benchCases))
	for i, c := range benchCases {
		cases[i] = textCase{name: c.name, pg: c.pg, col: c.col}
	}
	ds := caseDecoders(b, cases)
	m := pgtype.NewMap()
	var sink change.Value
	for i, c := range benchCases {
		text := []byte(c.text)
		if _, err := ds[i].Text(text); err != nil {
			b.Fatalf("%s: %v", c.name, err)
		}
		b.Run(c.name+"/pgvalue", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sink, _ = ds[i].Text(text)
			}
		})
		b.Run(c.name+"/pgtype", func(b *testing.B) {
			dst := c.pgx()
			b.ReportAllocs()
			for b.Loop() {
				_ = m.Scan(c.oid, pgtype.TextFormatCode, text, dst)
			}
		})
		b.Run(c.name+"/copy", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sink.S = string(text)
			}
		})
	}
	_ = sink
}

// BenchmarkRow converts a row of the types table's mix (the trigger
// path's types fixture: 14 typed columns of every family) per op; ns/value
// is the time of one value.
func BenchmarkRow(b *testing.B) {
	cases := make([]textCase, len(benchCases))
	for i, c := range benchCases {
		cases[i] = textCase{name: c.name, pg: c.pg, col: c.col}
	}
	ds := caseDecoders(b, cases)
	texts := make([][]byte, len(benchCases))
	for i, c := range benchCases {
		texts[i] = []byte(c.text)
	}
	row := make([]change.Value, len(ds))
	b.ReportAllocs()
	for b.Loop() {
		for i, d := range ds {
			v, err := d.Value('t', texts[i])
			if err != nil {
				b.Fatal(err)
			}
			row[i] = v
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(ds)), "ns/value")
}
