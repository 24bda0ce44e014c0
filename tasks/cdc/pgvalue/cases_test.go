package pgvalue

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
)

// textCase is one edge value of one PostgreSQL type read into one mapped
// ClickHouse column. text is what PostgreSQL prints for lit::pg under
// Settings (TestServerText and TestWalsenderText check it on the real
// server, so the unit tests read real output); want is the canonical value,
// or err the refusal.
type textCase struct {
	name string
	pg   string // the source column's type, as in DDL
	lit  string // an SQL literal of the value
	text string // PostgreSQL's text of it
	col  string // the mapping column: "Type[|source_type[|max_length]]"
	want change.Value
	err  error
}

func iv(n int64) change.Value     { return change.Value{N: uint64(n)} }
func uv(n uint64) change.Value    { return change.Value{N: n} }
func sv(s string) change.Value    { return change.Value{S: s} }
func fv(f float64) change.Value   { return change.FloatValue(f) }
func f32v(f float32) change.Value { return change.FloatValue(float64(f)) }

// dv is a Date: days since 1970-01-01, by package time.
func dv(y int, m time.Month, d int) change.Value {
	return iv(time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix() / 86400)
}

// at is an instant in UTC by package time (year astronomical).
func at(y int, m time.Month, d, hh, mm, ss, micro int) time.Time {
	return time.Date(y, m, d, hh, mm, ss, micro*1000, time.UTC)
}

func secv(t time.Time) change.Value { return iv(t.Unix()) }

// ticksv is a DateTime64(prec) value of t.
func ticksv(t time.Time, prec int) change.Value {
	per := int64(math.Pow10(prec))
	return iv(t.Unix()*per + int64(t.Nanosecond())/(1_000_000_000/per))
}

func uuidv(s string) change.Value {
	var u [16]byte
	if !parseUUID([]byte(s), &u) {
		panic("bad uuid in a test case: " + s)
	}
	return sv(string(u[:]))
}

const dt64 = "DateTime64(6, 'UTC')"

var textCases = []textCase{
	// smallint, integer, bigint
	{"int2 min", "smallint", "-32768", "-32768", "Int16", iv(-32768), nil},
	{"int2 max", "smallint", "32767", "32767", "Int16", iv(32767), nil},
	{"int2 min into Int64", "smallint", "-32768", "-32768", "Int64", iv(-32768), nil},
	{"int2 into UInt16", "smallint", "32767", "32767", "UInt16", uv(32767), nil},
	{"int2 max into UInt8", "smallint", "32767", "32767", "UInt8", change.Value{}, ErrOutOfRange},
	{"int2 negative into UInt16", "smallint", "-1", "-1", "UInt16", change.Value{}, ErrOutOfRange},
	{"int2 into Decimal", "smallint", "-1", "-1", "Decimal(5, 2)", sv("-100"), nil},
	{"int2 zero into Decimal", "smallint", "0", "0", "Decimal(5, 2)", sv("0"), nil},
	{"int2 into String", "smallint", "-7", "-7", "String", sv("-7"), nil},
	{"int4 min", "integer", "-2147483648", "-2147483648", "Int32", iv(-2147483648), nil},
	{"int4 max", "integer", "2147483647", "2147483647", "Int32", iv(2147483647), nil},
	{"int4 into Int16", "integer", "2147483647", "2147483647", "Int16", change.Value{}, ErrOutOfRange},
	{"int4 into Decimal(9, 0)", "integer", "2147483647", "2147483647", "Decimal(9, 0)", change.Value{}, ErrOutOfRange},
	{"int4 into Decimal(10, 0)", "integer", "-2147483648", "-2147483648", "Decimal(10, 0)", sv("-2147483648"), nil},
	{"int8 min", "bigint", "-9223372036854775808", "-9223372036854775808", "Int64", iv(math.MinInt64), nil},
	{"int8 max", "bigint", "9223372036854775807", "9223372036854775807", "Int64", iv(math.MaxInt64), nil},
	{"int8 max into UInt64", "bigint", "9223372036854775807", "9223372036854775807", "UInt64", uv(math.MaxInt64), nil},
	{"int8 negative into UInt64", "bigint", "-1", "-1", "UInt64", change.Value{}, ErrOutOfRange},
	{"int8 min into UInt64", "bigint", "-9223372036854775808", "-9223372036854775808", "UInt64", change.Value{}, ErrOutOfRange},
	{"int8 into Decimal(18, 0)", "bigint", "-9223372036854775808", "-9223372036854775808", "Decimal(18, 0)", change.Value{}, ErrOutOfRange},
	{"int8 into Decimal(19, 0)", "bigint", "-9223372036854775808", "-9223372036854775808", "Decimal(19, 0)", sv("-9223372036854775808"), nil},

	// numeric(p, s)
	{"numeric(12,2)", "numeric(12,2)", "12.5", "12.50", "Decimal(12, 2)", sv("1250"), nil},
	{"numeric(12,2) cent", "numeric(12,2)", "-0.01", "-0.01", "Decimal(12, 2)", sv("-1"), nil},
	{"numeric(12,2) zero", "numeric(12,2)", "0", "0.00", "Decimal(12, 2)", sv("0"), nil},
	{"numeric(12,2) min", "numeric(12,2)", "-9999999999.99", "-9999999999.99", "Decimal(12, 2)", sv("-999999999999"), nil},
	{"numeric(12,2) into a wider Decimal", "numeric(12,2)", "12.5", "12.50", "Decimal(20, 4)", sv("125000"), nil},
	{"numeric(12,2) into Decimal(11, 2)", "numeric(12,2)", "-9999999999.99", "-9999999999.99", "Decimal(11, 2)", change.Value{}, ErrOutOfRange},
	{"numeric(12,2) into Decimal(12, 1)", "numeric(12,2)", "12.55", "12.55", "Decimal(12, 1)", change.Value{}, ErrWouldRound},
	{"numeric(12,2) trailing zero into Decimal(12, 1)", "numeric(12,2)", "12.5", "12.50", "Decimal(12, 1)", sv("125"), nil},
	{"numeric(12,2) into String", "numeric(12,2)", "12.5", "12.50", "String|numeric", sv("12.50"), nil},
	{"numeric(12,2) zero into String", "numeric(12,2)", "0", "0.00", "String|numeric", sv("0.00"), nil},
	{"numeric(12,2) integral into Int64", "numeric(12,2)", "10", "10.00", "Int64", iv(10), nil},
	{"numeric(12,2) fraction into Int64", "numeric(12,2)", "12.5", "12.50", "Int64", change.Value{}, ErrWouldRound},
	{"numeric(3,-2) (PostgreSQL 15)", "numeric(3,-2)", "12345", "12300", "Decimal(5, 0)", sv("12300"), nil},
	{"numeric(2,5) (PostgreSQL 15)", "numeric(2,5)", "0.00012", "0.00012", "Decimal(5, 5)", sv("12"), nil},
	{"numeric(76,0) into Decimal(76, 0)", "numeric(76,0)", "-" + strings.Repeat("9", 76), "-" + strings.Repeat("9", 76), "Decimal(76, 0)", sv("-" + strings.Repeat("9", 76)), nil},

	// numeric
	{"numeric NaN into Decimal", "numeric", "'NaN'", "NaN", "Decimal(38, 10)", change.Value{}, ErrSpecialValue},
	{"numeric Infinity into Decimal", "numeric", "'Infinity'", "Infinity", "Decimal(38, 10)", change.Value{}, ErrSpecialValue},
	{"numeric -Infinity into Decimal", "numeric", "'-Infinity'", "-Infinity", "Decimal(38, 10)", change.Value{}, ErrSpecialValue},
	{"numeric NaN into Int64", "numeric", "'NaN'", "NaN", "Int64", change.Value{}, ErrSpecialValue},
	{"numeric NaN into String", "numeric", "'NaN'", "NaN", "String|numeric", sv("NaN"), nil},
	{"numeric Infinity into String", "numeric", "'Infinity'", "Infinity", "String|numeric", sv("Infinity"), nil},
	{"numeric -Infinity into String", "numeric", "'-Infinity'", "-Infinity", "String|numeric", sv("-Infinity"), nil},
	{"numeric tiny", "numeric", "0.0000000001", "0.0000000001", "Decimal(38, 10)", sv("1"), nil},
	{"numeric tinier", "numeric", "0.00000000000000000001", "0.00000000000000000001", "Decimal(38, 10)", change.Value{}, ErrWouldRound},
	{"numeric tinier into String", "numeric", "0.00000000000000000001", "0.00000000000000000001", "String|numeric", sv("0.00000000000000000001"), nil},
	{"numeric 38 digits", "numeric", "1234567890123456789012345678.1234567890", "1234567890123456789012345678.1234567890", "Decimal(38, 10)", sv("12345678901234567890123456781234567890"), nil},
	{"numeric scale 10 into String: zeros dropped", "numeric", "1234567890123456789012345678.1234567890", "1234567890123456789012345678.1234567890", "String|numeric", sv("1234567890123456789012345678.123456789"), nil},
	{"numeric zero with a scale into String", "numeric", "0.000", "0.000", "String|numeric", sv("0"), nil},
	{"numeric zero with a scale into Decimal", "numeric", "0.000", "0.000", "Decimal(38, 10)", sv("0"), nil},
	{"numeric 100.500 into String", "numeric", "100.500", "100.500", "String|numeric", sv("100.5"), nil},
	{"numeric 100 into String", "numeric", "100", "100", "String|numeric", sv("100"), nil},
	{"numeric negative half", "numeric", "-0.5", "-0.5", "Decimal(38, 10)", sv("-5000000000"), nil},
	{"numeric -1e30 into Decimal(38, 10)", "numeric", "-1e30", "-1" + strings.Repeat("0", 30), "Decimal(38, 10)", change.Value{}, ErrOutOfRange},
	{"numeric -1e30 into Decimal(31, 0)", "numeric", "-1e30", "-1" + strings.Repeat("0", 30), "Decimal(31, 0)", sv("-1" + strings.Repeat("0", 30)), nil},
	{"numeric -1e30 into String", "numeric", "-1e30", "-1" + strings.Repeat("0", 30), "String|numeric", sv("-1" + strings.Repeat("0", 30)), nil},
	{"numeric 1e300 into Decimal(76, 0)", "numeric", "1e300", "1" + strings.Repeat("0", 300), "Decimal(76, 0)", change.Value{}, ErrOutOfRange},
	{"numeric 1e-300 into Decimal(76, 76)", "numeric", "1e-300", "0." + strings.Repeat("0", 299) + "1", "Decimal(76, 76)", change.Value{}, ErrWouldRound},
	{"numeric integral into UInt8", "numeric", "255", "255", "UInt8", uv(255), nil},
	{"numeric too big for UInt8", "numeric", "256", "256", "UInt8", change.Value{}, ErrOutOfRange},
	{"numeric beyond Int64", "numeric", "9223372036854775808", "9223372036854775808", "Int64", change.Value{}, ErrOutOfRange},
	{"numeric beyond UInt64", "numeric", "18446744073709551616", "18446744073709551616", "UInt64", change.Value{}, ErrOutOfRange},
	{"numeric UInt64 max", "numeric", "18446744073709551615", "18446744073709551615", "UInt64", uv(math.MaxUint64), nil},
	{"numeric(1000,0) beyond 76 digits into String", "numeric(1000,0)", "1e100", "1" + strings.Repeat("0", 100), "String|numeric", sv("1" + strings.Repeat("0", 100)), nil},

	// real, double precision (shortest exact text)
	{"real 1.5", "real", "1.5", "1.5", "Float32", f32v(1.5), nil},
	{"real 0.1", "real", "0.1", "0.1", "Float32", f32v(0.1), nil},
	{"real 0.1 into Float64: the float32 widened", "real", "0.1", "0.1", "Float64", f32v(0.1), nil},
	{"real max", "real", "3.4028235e38", "3.4028235e+38", "Float32", f32v(math.MaxFloat32), nil},
	{"real min normal", "real", "1.17549435e-38", "1.1754944e-38", "Float32", f32v(1.17549435e-38), nil},
	{"real min denormal", "real", "1e-45", "1e-45", "Float32", f32v(math.SmallestNonzeroFloat32), nil},
	{"real 16777217 rounds on input", "real", "16777217", "1.6777216e+07", "Float32", f32v(16777216), nil},
	{"real NaN", "real", "'NaN'", "NaN", "Float32", fv(math.NaN()), nil},
	{"real Infinity", "real", "'Infinity'", "Infinity", "Float32", fv(math.Inf(1)), nil},
	{"real -Infinity", "real", "'-Infinity'", "-Infinity", "Float32", fv(math.Inf(-1)), nil},
	{"real -0", "real", "'-0'", "-0", "Float32", fv(math.Copysign(0, -1)), nil},
	{"real into String", "real", "0.1", "0.1", "String", sv("0.1"), nil},
	{"double 0.1", "double precision", "0.1", "0.1", "Float64", fv(0.1), nil},
	{"double 0.1 into Float32", "double precision", "0.1", "0.1", "Float32", change.Value{}, ErrWouldRound},
	{"double 1.5 into Float32", "double precision", "1.5", "1.5", "Float32", f32v(1.5), nil},
	{"double NaN into Float32", "double precision", "'NaN'", "NaN", "Float32", fv(math.NaN()), nil},
	{"double min denormal", "double precision", "5e-324", "5e-324", "Float64", fv(5e-324), nil},
	{"double max", "double precision", "1.7976931348623157e308", "1.7976931348623157e+308", "Float64", fv(math.MaxFloat64), nil},
	{"double -1e-10", "double precision", "-1e-10", "-1e-10", "Float64", fv(-1e-10), nil},
	{"double 1e15", "double precision", "1e15", "1e+15", "Float64", fv(1e15), nil},
	{"double 17 digits", "double precision", "0.30000000000000004", "0.30000000000000004", "Float64", fv(0.30000000000000004), nil},
	{"double -0", "double precision", "'-0'", "-0", "Float64", fv(math.Copysign(0, -1)), nil},
	{"double Infinity", "double precision", "'Infinity'", "Infinity", "Float64", fv(math.Inf(1)), nil},

	// boolean
	{"bool true", "boolean", "true", "t", "Bool", uv(1), nil},
	{"bool false", "boolean", "false", "f", "Bool", uv(0), nil},
	{"bool into String", "boolean", "true", "t", "String", sv("t"), nil},

	// text, varchar(n), char(n)
	{"text unicode", "text", `'héllo ☃ 😀 "quoted" \ back'`, `héllo ☃ 😀 "quoted" \ back`, "String", sv(`héllo ☃ 😀 "quoted" \ back`), nil},
	{"text controls", "text", `E'tab\tand\nnewline\r'`, "tab\tand\nnewline\r", "String", sv("tab\tand\nnewline\r"), nil},
	{"text empty", "text", "''", "", "String", sv(""), nil},
	{"varchar(8) at max_length", "varchar(8)", "'ÄÖÜßéèêë'", "ÄÖÜßéèêë", "String||8", sv("ÄÖÜßéèêë"), nil},
	{"text beyond max_length", "text", "'ÄÖÜßéèêëx'", "ÄÖÜßéèêëx", "String||8", change.Value{}, ErrTooLong},
	{"char(5) keeps its padding", "char(5)", "'ab'", "ab   ", "String", sv("ab   "), nil},
	{"char(5) padding counts", "char(5)", "'ab'", "ab   ", "String||3", change.Value{}, ErrTooLong},
	{"varchar into String source text", "varchar", "'x'", "x", "String|text", sv("x"), nil},

	// json, jsonb
	{"json as written", "json", `'{"b": 1,   "a": [1, 2.50], "b": 2}'`, `{"b": 1,   "a": [1, 2.50], "b": 2}`, "String", sv(`{"b": 1,   "a": [1, 2.50], "b": 2}`), nil},
	{"jsonb normalized", "jsonb", `'{"b": 1, "a": [1, 2.50, 1.0e+2], "é": "ü"}'`, `{"a": [1, 2.50, 100], "b": 1, "é": "ü"}`, "String|jsonb", sv(`{"a": [1, 2.50, 100], "b": 1, "é": "ü"}`), nil},

	// bytea
	{"bytea", "bytea", `'\x00ff41'`, `\x00ff41`, "String", sv("\x00\xffA"), nil},
	{"bytea empty", "bytea", `'\x'`, `\x`, "String|bytea", sv(""), nil},
	{"bytea beyond max_length", "bytea", `'\x00ff41'`, `\x00ff41`, "String||2", change.Value{}, ErrTooLong},

	// uuid
	{"uuid", "uuid", "'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "UUID", uuidv("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"), nil},
	{"uuid into String", "uuid", "'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "String|uuid", sv("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"), nil},
	{"uuid max", "uuid", "'ffffffff-ffff-ffff-ffff-ffffffffffff'", "ffffffff-ffff-ffff-ffff-ffffffffffff", "UUID", sv(strings.Repeat("\xff", 16)), nil},

	// date
	{"date", "date", "'2024-02-29'", "2024-02-29", "Date", dv(2024, 2, 29), nil},
	{"date epoch", "date", "'1970-01-01'", "1970-01-01", "Date", uv(0), nil},
	{"date last Date", "date", "'2149-06-06'", "2149-06-06", "Date", uv(65535), nil},
	{"date after Date", "date", "'2149-06-07'", "2149-06-07", "Date", change.Value{}, ErrOutOfRange},
	{"date before Date", "date", "'1969-12-31'", "1969-12-31", "Date", change.Value{}, ErrOutOfRange},
	{"date before Date into String", "date", "'1969-12-31'", "1969-12-31", "String|date", sv("1969-12-31"), nil},
	{"date infinity into Date", "date", "'infinity'", "infinity", "Date", change.Value{}, ErrSpecialValue},
	{"date -infinity into Date", "date", "'-infinity'", "-infinity", "Date", change.Value{}, ErrSpecialValue},
	{"date infinity into String", "date", "'infinity'", "infinity", "String|date", sv("infinity"), nil},
	{"date -infinity into String", "date", "'-infinity'", "-infinity", "String|date", sv("-infinity"), nil},
	{"date BC into Date", "date", "'0044-03-15 BC'", "0044-03-15 BC", "Date", change.Value{}, ErrOutOfRange},
	{"date BC into String", "date", "'0044-03-15 BC'", "0044-03-15 BC", "String|date", sv("0044-03-15 BC"), nil},
	{"date first", "date", "'4713-01-01 BC'", "4713-01-01 BC", "String|date", sv("4713-01-01 BC"), nil},
	{"date year 10000", "date", "'10000-01-01'", "10000-01-01", "String|date", sv("10000-01-01"), nil},
	{"date last", "date", "'5874897-12-31'", "5874897-12-31", "String|date", sv("5874897-12-31"), nil},

	// timestamp
	{"timestamp micros", "timestamp", "'2024-02-29 12:34:56.123456'", "2024-02-29 12:34:56.123456", dt64, ticksv(at(2024, 2, 29, 12, 34, 56, 123456), 6), nil},
	{"timestamp micros into DateTime", "timestamp", "'2024-02-29 12:34:56.123456'", "2024-02-29 12:34:56.123456", "DateTime('UTC')", change.Value{}, ErrWouldRound},
	{"timestamp micros into DateTime64(3)", "timestamp", "'2024-02-29 12:34:56.123456'", "2024-02-29 12:34:56.123456", "DateTime64(3, 'UTC')", change.Value{}, ErrWouldRound},
	{"timestamp millis into DateTime64(3)", "timestamp", "'2024-02-29 12:34:56.123'", "2024-02-29 12:34:56.123", "DateTime64(3, 'UTC')", ticksv(at(2024, 2, 29, 12, 34, 56, 123000), 3), nil},
	{"timestamp half into DateTime64(1)", "timestamp", "'2024-01-01 00:00:00.5'", "2024-01-01 00:00:00.5", "DateTime64(1, 'UTC')", ticksv(at(2024, 1, 1, 0, 0, 0, 500000), 1), nil},
	{"timestamp into DateTime64(9)", "timestamp", "'2024-02-29 12:34:56.123456'", "2024-02-29 12:34:56.123456", "DateTime64(9, 'UTC')", ticksv(at(2024, 2, 29, 12, 34, 56, 123456), 9), nil},
	{"timestamp beyond DateTime64(9)", "timestamp", "'2263-01-01 00:00:00'", "2263-01-01 00:00:00", "DateTime64(9, 'UTC')", change.Value{}, ErrOutOfRange},
	{"timestamp whole into DateTime", "timestamp", "'2024-01-02 03:04:05'", "2024-01-02 03:04:05", "DateTime('UTC')", secv(at(2024, 1, 2, 3, 4, 5, 0)), nil},
	{"timestamp(0) rounds on input", "timestamp(0)", "'2024-01-02 03:04:05.7'", "2024-01-02 03:04:06", "DateTime('UTC')", secv(at(2024, 1, 2, 3, 4, 6, 0)), nil},
	{"timestamp DateTime's last", "timestamp", "'2106-02-07 06:28:15'", "2106-02-07 06:28:15", "DateTime('UTC')", uv(math.MaxUint32), nil},
	{"timestamp after DateTime", "timestamp", "'2106-02-07 06:28:16'", "2106-02-07 06:28:16", "DateTime('UTC')", change.Value{}, ErrOutOfRange},
	{"timestamp before DateTime", "timestamp", "'1969-12-31 23:59:59'", "1969-12-31 23:59:59", "DateTime('UTC')", change.Value{}, ErrOutOfRange},
	{"timestamp a tick before the epoch", "timestamp", "'1969-12-31 23:59:59.999999'", "1969-12-31 23:59:59.999999", dt64, iv(-1), nil},
	{"timestamp DateTime64's first", "timestamp", "'1900-01-01 00:00:00'", "1900-01-01 00:00:00", dt64, ticksv(at(1900, 1, 1, 0, 0, 0, 0), 6), nil},
	{"timestamp before DateTime64", "timestamp", "'1899-12-31 23:59:59.999999'", "1899-12-31 23:59:59.999999", dt64, change.Value{}, ErrOutOfRange},
	{"timestamp DateTime64's last", "timestamp", "'2299-12-31 23:59:59.999999'", "2299-12-31 23:59:59.999999", dt64, ticksv(at(2299, 12, 31, 23, 59, 59, 999999), 6), nil},
	{"timestamp after DateTime64", "timestamp", "'2300-01-01 00:00:00'", "2300-01-01 00:00:00", dt64, change.Value{}, ErrOutOfRange},
	{"timestamp infinity into DateTime64", "timestamp", "'infinity'", "infinity", dt64, change.Value{}, ErrSpecialValue},
	{"timestamp -infinity into DateTime", "timestamp", "'-infinity'", "-infinity", "DateTime('UTC')", change.Value{}, ErrSpecialValue},
	{"timestamp infinity into String", "timestamp", "'infinity'", "infinity", "String|timestamp", sv("infinity"), nil},
	{"timestamp -infinity into String", "timestamp", "'-infinity'", "-infinity", "String|timestamp", sv("-infinity"), nil},
	{"timestamp into String", "timestamp", "'2024-02-29 12:34:56.1'", "2024-02-29 12:34:56.1", "String|timestamp", sv("2024-02-29 12:34:56.100000"), nil},
	{"timestamp whole into String", "timestamp", "'1970-01-01 00:00:00'", "1970-01-01 00:00:00", "String|timestamp", sv("1970-01-01 00:00:00.000000"), nil},
	{"timestamp before DateTime64 into String", "timestamp", "'1899-12-31 23:59:59.999999'", "1899-12-31 23:59:59.999999", "String|timestamp", sv("1899-12-31 23:59:59.999999"), nil},
	{"timestamp BC into DateTime64", "timestamp", "'0044-03-15 12:00:00.5 BC'", "0044-03-15 12:00:00.5 BC", dt64, change.Value{}, ErrOutOfRange},
	{"timestamp BC into String", "timestamp", "'0044-03-15 12:00:00.5 BC'", "0044-03-15 12:00:00.5 BC", "String|timestamp", sv("0044-03-15 12:00:00.500000 BC"), nil},
	{"timestamp first", "timestamp", "'4713-01-01 00:00:00 BC'", "4713-01-01 00:00:00 BC", "String|timestamp", sv("4713-01-01 00:00:00.000000 BC"), nil},
	{"timestamp year 10000", "timestamp", "'10000-01-01 00:00:00'", "10000-01-01 00:00:00", "String|timestamp", sv("10000-01-01 00:00:00.000000"), nil},
	{"timestamp last", "timestamp", "'294276-12-31 23:59:59.999999'", "294276-12-31 23:59:59.999999", "String|timestamp", sv("294276-12-31 23:59:59.999999"), nil},
	{"timestamp into DateTime64 of another zone: wall clock as UTC", "timestamp", "'2024-02-29 12:34:56'", "2024-02-29 12:34:56", "DateTime64(6, 'Europe/Berlin')", ticksv(at(2024, 2, 29, 12, 34, 56, 0), 6), nil},

	// timestamptz (printed in UTC here; TestServerText reads them in other zones too)
	{"timestamptz +05:30", "timestamptz", "'2024-02-29 12:34:56.123456+05:30'", "2024-02-29 07:04:56.123456+00", dt64, ticksv(at(2024, 2, 29, 7, 4, 56, 123456), 6), nil},
	{"timestamptz +05:30 into String", "timestamptz", "'2024-02-29 12:34:56.123456+05:30'", "2024-02-29 07:04:56.123456+00", "String|timestamptz", sv("2024-02-29 07:04:56.123456"), nil},
	{"timestamptz -03:00", "timestamptz", "'1970-01-01 00:00:00.5-03:00'", "1970-01-01 03:00:00.5+00", dt64, ticksv(at(1970, 1, 1, 3, 0, 0, 500000), 6), nil},
	{"timestamptz +14", "timestamptz", "'2024-01-01 00:00:00+14'", "2023-12-31 10:00:00+00", "DateTime('UTC')", secv(at(2023, 12, 31, 10, 0, 0, 0)), nil},
	{"timestamptz into DateTime of another zone", "timestamptz", "'2024-01-01 00:00:00+14'", "2023-12-31 10:00:00+00", "DateTime('Asia/Tokyo')", secv(at(2023, 12, 31, 10, 0, 0, 0)), nil},
	{"timestamptz 1890", "timestamptz", "'1890-03-04 10:00:00+00'", "1890-03-04 10:00:00+00", "String|timestamptz", sv("1890-03-04 10:00:00.000000"), nil},
	{"timestamptz 1890 into DateTime64", "timestamptz", "'1890-03-04 10:00:00+00'", "1890-03-04 10:00:00+00", dt64, change.Value{}, ErrOutOfRange},
	{"timestamptz 1900", "timestamptz", "'1900-01-01 00:00:00+00'", "1900-01-01 00:00:00+00", dt64, ticksv(at(1900, 1, 1, 0, 0, 0, 0), 6), nil},
	{"timestamptz infinity into DateTime64", "timestamptz", "'infinity'", "infinity", dt64, change.Value{}, ErrSpecialValue},
	{"timestamptz -infinity into String", "timestamptz", "'-infinity'", "-infinity", "String|timestamptz", sv("-infinity"), nil},
	{"timestamptz BC into String", "timestamptz", "'0044-03-15 12:00:00+00 BC'", "0044-03-15 12:00:00+00 BC", "String|timestamptz", sv("0044-03-15 12:00:00.000000 BC"), nil},
	{"timestamptz fraction into DateTime", "timestamptz", "'2024-01-01 00:00:00.25+00'", "2024-01-01 00:00:00.25+00", "DateTime", change.Value{}, ErrWouldRound},

	// types held as their text
	{"time", "time", "'10:30:00.123456'", "10:30:00.123456", "String", sv("10:30:00.123456"), nil},
	{"time 24:00", "time", "'24:00:00'", "24:00:00", "String", sv("24:00:00"), nil},
	{"timetz", "timetz", "'10:30:00+05:30'", "10:30:00+05:30", "String", sv("10:30:00+05:30"), nil},
	{"interval", "interval", "'1 year 2 months 3 days 04:05:06.7'", "1 year 2 mons 3 days 04:05:06.7", "String", sv("1 year 2 mons 3 days 04:05:06.7"), nil},
	{"integer array", "integer[]", "'{1,2,NULL}'", "{1,2,NULL}", "String", sv("{1,2,NULL}"), nil},
	{"inet", "inet", "'192.168.0.1/24'", "192.168.0.1/24", "String", sv("192.168.0.1/24"), nil},
}

// caseMapping is a mapping with one column per case (c0, c1, …) and a key
// id Int32.
func caseMapping(t testing.TB, cases []textCase) *mapping.Mapping {
	t.Helper()
	var b strings.Builder
	b.WriteString("source: {database: d, schema: public, table: edge}\ntarget: {table: edge_cdc}\nkey: [id]\ncolumns:\n  - {name: id, type: Int32}\n")
	for i, c := range cases {
		parts := strings.Split(c.col, "|")
		fmt.Fprintf(&b, "  - {name: c%d, type: %q", i, parts[0])
		if len(parts) > 1 && parts[1] != "" {
			fmt.Fprintf(&b, ", source_type: %q", parts[1])
		}
		if len(parts) > 2 {
			fmt.Fprintf(&b, ", max_length: %s", parts[2])
		}
		b.WriteString("}\n")
	}
	m, err := mapping.Parse("cases", []byte(b.String()))
	if err != nil {
		t.Fatalf("the cases' mapping: %v", err)
	}
	return m
}

// sourceColumn is the Column of a type as DDL spells it, with the OID and
// typmod PostgreSQL gives it (TestServerText compares them with
// pg_attribute's).
func sourceColumn(t testing.TB, name, typ string) Column {
	t.Helper()
	base, mod, _ := strings.Cut(strings.TrimSuffix(typ, ")"), "(")
	oids := map[string]uint32{"smallint": 21, "integer": 23, "bigint": 20, "numeric": 1700, "real": 700,
		"double precision": 701, "boolean": 16, "text": 25, "varchar": 1043, "char": 1042, "json": 114,
		"jsonb": 3802, "bytea": 17, "uuid": 2950, "date": 1082, "timestamp": 1114, "timestamptz": 1184,
		"time": 1083, "timetz": 1266, "interval": 1186, "integer[]": 1007, "inet": 869}
	oid, ok := oids[base]
	if !ok {
		t.Fatalf("sourceColumn: unknown type %q", typ)
	}
	c := Column{Name: name, TypeOID: oid, TypeMod: -1, TypeName: typ} // TypeName: format_type's, for the types typeName does not know
	if mod != "" {
		args := strings.Split(mod, ",")
		n, _ := strconv.Atoi(args[0])
		switch base {
		case "numeric":
			s := 0
			if len(args) > 1 {
				s, _ = strconv.Atoi(args[1])
			}
			c.TypeMod = int32(n<<16|s&0x7ff) + varHeader
		case "varchar", "char":
			c.TypeMod = int32(n) + varHeader
		default:
			c.TypeMod = int32(n)
		}
	}
	return c
}

// checkCase converts text (what the server printed for the case) and
// compares the result with the case's.
func checkCase(t *testing.T, c textCase, d *Decoder, text []byte) {
	t.Helper()
	got, err := d.Text(text)
	if c.err != nil {
		if err == nil {
			t.Errorf("%s: %q: got %+v, want a refusal (%v)", c.name, text, got, c.err)
			return
		}
		if !isRefusal(err, c.err) {
			t.Errorf("%s: %q: got %v, want %v", c.name, text, err, c.err)
		}
		if len(err.Error()) > 200 {
			t.Errorf("%s: the message is %d characters long (at most 200): %v", c.name, len(err.Error()), err)
		}
		return
	}
	if err != nil {
		t.Errorf("%s: %q: %v", c.name, text, err)
		return
	}
	if !got.Equal(c.want) {
		t.Errorf("%s: %q: got %+v, want %+v", c.name, text, got, c.want)
	}
}
