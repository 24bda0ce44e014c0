package cdc

import (
	"context"
	"errors"
	"math"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"

	"github.com/changesink/changesink/internal/iongen"
)

// everythingRow is a row image of the types mappings with every Debezium
// shape: ints, a UInt64 beyond int64, a float4 widened to a double, a
// float8, decimals (12.50), an unconstrained numeric as {scale, value}, a
// bool, a day timestamp, a millisecond timestamp, annotated ZonedDateTime
// and LocalDateTime strings, a UUID, nulls and a blob.
func everythingRow(id int64, current bool) iongen.Struct {
	two64m1 := new(big.Int).SetUint64(math.MaxUint64)
	row := iongen.Struct{
		{"id", id}, {"code", "A-1"},
		{"i8", int64(-128)}, {"i16", int64(32767)}, {"i32", int64(-2147483648)},
		{"u8", int64(255)}, {"u16", int64(65535)}, {"u32", int64(4294967295)}, {"u64", two64m1},
		{"f32", 3.200000047683716}, {"f64", 1.0e-7},
		{"price", iongen.Decimal("12.50")}, {"big", iongen.Decimal("123456789012345678.0123456789")},
		{"var_num", iongen.Struct{{"scale", int64(2)}, {"value", iongen.Blob{0xFB, 0x1E}}}}, // -1250 → -12.50
		{"flag", true}, {"day", iongen.Day(2024, 1, 15)},
		{"at", iongen.Millis(time.Date(2024, 1, 15, 10, 30, 0, 0, time.UTC))},
		{"uid", "6F1C7A3E-2B4D-4C8E-9F10-112233445566"},
		{"note", nil}, {"qty", iongen.Null(0x2)}, {"payload", iongen.Blob("\x00\xffbin")},
	}
	if current {
		row[16] = iongen.Field{"at", iongen.Millis(time.Date(2024, 1, 15, 10, 30, 0, 123_000_000, time.UTC))}
		row = append(row[:17], append(iongen.Struct{
			{"zoned", iongen.Annotated{"ZonedDateTime", "2024-01-15T10:30:00.123456Z"}},
			{"local", iongen.Annotated{"LocalDateTime", "2024-01-15T10:30:00.654321"}},
		}, row[17:]...)...)
	}
	return row
}

func everythingEvent(row iongen.Struct, lsn int64) iongen.Struct {
	return iongen.Event(row, false, iongen.Metadata("UPDATE", iongen.Source("shop", "public", "everything", lsn, 9, "false")))
}

func TestDecodeEveryType(t *testing.T) {
	tests := []struct {
		mapping string
		current bool
		want    string
	}{
		{"testdata/types.mapping.yaml", false,
			`{"id": 1, "code": "A-1", "i8": -128, "i16": 32767, "i32": -2147483648, "u8": 255, "u16": 65535, "u32": 4294967295, ` +
				`"u64": 18446744073709551615, "f32": 3.200000047683716, "f64": 1e-07, "price": 12.50, "big": 123456789012345678.0123456789, ` +
				`"var_num": -12.5000, "flag": true, "day": "2024-01-15", "at": "2024-01-15T10:30:00Z", ` +
				`"uid": "6f1c7a3e-2b4d-4c8e-9f10-112233445566", "note": null, "qty": null, "payload": "\u0000` + "\ufffd" + `bin", "_cdc_lsn": 5, "_cdc_deleted": 0}`},
		{"testdata/types_current.mapping.yaml", true,
			`{"id": 1, "code": "A-1", "i8": -128, "i16": 32767, "i32": -2147483648, "u8": 255, "u16": 65535, "u32": 4294967295, ` +
				`"u64": 18446744073709551615, "f32": 3.200000047683716, "f64": 1e-07, "price": 12.50, "big": 123456789012345678.0123456789, ` +
				`"var_num": -12.5000, "flag": true, "day": "2024-01-15", "at": "2024-01-15T10:30:00.123Z", ` +
				`"zoned": "2024-01-15T10:30:00.123456Z", "local": "2024-01-15T10:30:00.654321Z", ` +
				`"uid": "6f1c7a3e-2b4d-4c8e-9f10-112233445566", "note": null, "qty": null, "payload": "\u0000` + "\ufffd" + `bin", "_cdc_lsn": 5, "_cdc_deleted": 0}`},
	}
	for _, tt := range tests {
		m := loadMapping(t, tt.mapping)
		for _, f := range forms() {
			t.Run(tt.mapping+"/"+f.name, func(t *testing.T) {
				b, err := decodeBytes(t, m, encode(t, f.binary, everythingEvent(everythingRow(1, tt.current), 5)), 1)
				if err != nil {
					t.Fatal(err)
				}
				if got := strings.TrimSuffix(jsonLines(b), "\n"); got != tt.want {
					t.Errorf("row\n got %s\nwant %s", got, tt.want)
				}
			})
		}
	}
}

// TestTypeRefusals replaces one column of a good row with a value that
// does not fit, and checks the refusal names the column and the reason.
func TestTypeRefusals(t *testing.T) {
	m := loadMapping(t, "testdata/types_current.mapping.yaml")
	two64 := new(big.Int).Lsh(big.NewInt(1), 64)
	tests := []struct {
		column string
		value  any
		want   string
	}{
		{"i8", int64(128), "128 is out of range for Int8"},
		{"id", new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(-1), 63), big.NewInt(1)), "-9223372036854775809 is out of range for Int64"},
		{"i16", int64(-32769), "-32769 is out of range for Int16"},
		{"i32", int64(2147483648), "2147483648 is out of range for Int32"},
		{"u8", int64(256), "256 is out of range for UInt8"},
		{"u32", int64(-1), "-1 is negative for an unsigned column"},
		{"u64", two64, "18446744073709551616 is out of range for UInt64"},
		{"u64", 1.5, "expected an Ion int (or a decimal without fraction digits, 5.) for UInt64, got an Ion float"},
		{"f32", 0.1, "0.1 is not exactly a Float32 (a PostgreSQL real arrives widened exactly; map a double precision column to Float64)"},
		{"f64", int64(1), "expected an Ion float for Float64, got an Ion int"},
		{"price", iongen.Decimal("12.505"), "12.505 has more than 2 decimal places"},
		{"price", iongen.Decimal("10000000000.00"), "10000000000.00 does not fit Decimal(12, 2)"},
		{"price", 12.5, "expected an Ion decimal or int (or a decimal string, or Debezium's {scale, value} struct) for Decimal(12, 2), got an Ion float"},
		{"price", "twelve", "the string is not a decimal number"},
		{"code", iongen.Struct{{"scale", int64(2)}, {"value", iongen.Blob{0x04, 0xE2}}},
			"expected an Ion string, symbol or blob for String, got an Ion struct (an unconstrained numeric: {scale, value})"},
		{"code", "ABCDEFGHI", "9 characters exceed max_length 8"},
		{"var_num", iongen.Struct{{"scale", int64(5)}, {"value", iongen.Blob{0x04, 0xE3}}}, "0.01251 has more than 4 decimal places"},
		{"var_num", iongen.Struct{{"precision", int64(5)}}, `a struct with field "precision"; expected Debezium's {scale, value} decimal`},
		{"flag", int64(1), "expected an Ion bool for Bool, got an Ion int"},
		{"day", iongen.Millis(time.Date(2024, 1, 15, 0, 0, 0, 0, time.UTC)),
			"a timestamp with precision Nanosecond for a Date column; a date arrives as a day timestamp such as 2024-01-15"},
		{"day", iongen.Day(1969, 12, 31), "1969-12-31 is outside the Date range 1970-01-01..2149-06-06"},
		{"at", iongen.Day(2024, 1, 15), "a date without a time (Day precision) for DateTime64(3, 'UTC')"},
		{"at", iongen.Annotated{"ZonedDateTime", "2024-01-15T10:30:00.1234Z"}, "2024-01-15T10:30:00.1234Z has more sub-second digits than DateTime64(3)"},
		{"zoned", iongen.Annotated{"ZonedDateTime", "1899-12-31T23:59:59Z"}, "1899-12-31T23:59:59Z is outside the DateTime64 range 1900-01-01..2299-12-31"},
		{"zoned", iongen.Annotated{"ZonedDateTime", "yesterday"}, "the string is not an ISO 8601 date-time"},
		// A time without an offset is read in the column's zone: one the zone
		// skips (spring forward) or shows twice (fall back) names no single
		// instant, and is refused instead of moved by an hour.
		{"zoned", iongen.Annotated{"LocalDateTime", "2024-03-31T02:30:00"}, "2024-03-31T02:30:00 does not exist in Europe/Paris " +
			"(its clocks skip it: daylight saving time begins)"},
		{"zoned", iongen.Annotated{"LocalDateTime", "2024-10-27T02:30:00"}, "2024-10-27T02:30:00 occurs twice in Europe/Paris " +
			"(its clocks repeat it: daylight saving time ends): 2024-10-27T00:30:00Z or 2024-10-27T01:30:00Z"},
		{"uid", "not-a-uuid", "the string is not a UUID"},
		{"uid", nil, "null in a column that is not Nullable (UUID)"},
		{"qty", "5", "expected an Ion int (or a decimal without fraction digits, 5.) for Nullable(Int32), got an Ion string"},
		{"f64", iongen.Decimal("12.50"), "expected an Ion float for Float64, got an Ion decimal (a numeric(p,s))"},
		{"uid", iongen.Blob{0xde, 0xad}, "expected an Ion string holding a UUID for UUID, got an Ion blob (a bytea)"},
		// The TOAST placeholder, in a create (an update's is filled from
		// the row's previous version), in every form it arrives in.
		{"note", change.ToastPlaceholder, ""},
		{"payload", iongen.Blob(change.ToastPlaceholder), ""},
		{"uid", iongen.Blob(change.ToastPlaceholder), ""},
		{"qty", iongen.Symbol(change.ToastPlaceholder), ""},
	}
	for _, tt := range tests {
		t.Run(tt.column, func(t *testing.T) {
			row := everythingRow(7, true)
			found := false
			for i := range row {
				if row[i].Name == tt.column {
					row[i].Value, found = tt.value, true
				}
			}
			if !found {
				t.Fatalf("no column %s", tt.column)
			}
			ev := everythingEvent(row, 42)
			if tt.want == "" {
				ev = iongen.Event(row, false, iongen.Metadata("CREATE", iongen.Source("shop", "public", "everything", int64(42), 9, "false")))
			}
			_, err := decodeBytes(t, m, encode(t, true, ev), 1)
			var re *change.RecordError
			if !errors.As(err, &re) {
				t.Fatalf("err = %v, want a RecordError", err)
			}
			wantKey := `id=7, code="A-1"`
			if tt.column == "code" || tt.column == "id" {
				wantKey = "" // a bad key column leaves no key to name
			}
			if re.Column != tt.column || re.Key != wantKey || re.LSN != 42 || re.Record != 1 {
				t.Errorf("located at record %d column %q key %q LSN %d", re.Record, re.Column, re.Key, re.LSN)
			}
			if tt.want == "" {
				if !errors.Is(err, change.ErrToast) {
					t.Errorf("err = %v, want ErrToast", err)
				}
				return
			}
			if !errors.Is(err, change.ErrBadValue) || !strings.HasSuffix(err.Error(), ": "+tt.want) {
				t.Errorf("error\n got %v\nwant …: %s", err, tt.want)
			}
		})
	}
}

func TestAcceptedTimeForms(t *testing.T) {
	m := loadMapping(t, "testdata/types_current.mapping.yaml")
	tests := []struct {
		column string
		value  any
		want   string
	}{
		{"zoned", iongen.Annotated{"ZonedDateTime", "2024-01-15T11:30:00.5+01:00[Europe/Paris]"}, `"zoned": "2024-01-15T10:30:00.500000Z"`},
		{"zoned", iongen.Annotated{"OffsetDateTime", "2024-01-15T10:30-02:00"}, `"zoned": "2024-01-15T12:30:00.000000Z"`},
		{"zoned", iongen.Timestamp{Time: time.Date(2024, 1, 15, 10, 30, 0, 0, time.UTC), Precision: 4}, `"zoned": "2024-01-15T10:30:00.000000Z"`},
		{"local", iongen.Annotated{"LocalDateTime", "2024-01-15T10:30"}, `"local": "2024-01-15T10:30:00.000000Z"`},
		{"local", nil, `"local": null`},
		{"day", iongen.Annotated{"LocalDate", "2149-06-06"}, `"day": "2149-06-06"`},
		{"price", "-0.5", `"price": -0.50`},
		{"price", int64(3), `"price": 3.00`},
		{"code", iongen.Symbol("sym"), `"code": "sym"`},
	}
	for _, tt := range tests {
		t.Run(tt.column, func(t *testing.T) {
			row := everythingRow(7, true)
			for i := range row {
				if row[i].Name == tt.column {
					row[i].Value = tt.value
				}
			}
			b, err := decodeBytes(t, m, encode(t, false, everythingEvent(row, 42)), 1)
			if err != nil {
				t.Fatal(err)
			}
			if got := jsonLines(b); !strings.Contains(got, tt.want) {
				t.Errorf("row %s lacks %s", got, tt.want)
			}
		})
	}
}

// TestOmittedNullableColumnsAreNull: Kestra's Debezium trigger serializes
// events with NON_NULL inclusion, so a NULL column is absent from the
// record. For a Nullable column that is NULL, exactly as an explicit null.
func TestOmittedNullableColumnsAreNull(t *testing.T) {
	m := loadMapping(t, "testdata/types.mapping.yaml")
	var omitted iongen.Struct
	for _, f := range everythingRow(1, false) {
		if f.Name != "note" && f.Name != "qty" {
			omitted = append(omitted, f)
		}
	}
	for _, f := range forms() {
		t.Run(f.name, func(t *testing.T) {
			want, err := decodeBytes(t, m, encode(t, f.binary, everythingEvent(everythingRow(1, false), 5)), 1)
			if err != nil {
				t.Fatal(err)
			}
			got, err := decodeBytes(t, m, encode(t, f.binary, everythingEvent(omitted, 5)), 1)
			if err != nil {
				t.Fatal(err)
			}
			if g, w := jsonLines(got), jsonLines(want); g != w || !strings.Contains(g, `"note": null, "qty": null`) {
				t.Errorf("omitted nullable columns\n got %s\nwant %s", g, w)
			}
		})
	}
}

// TestSourceTypeText: a String column with a source_type holds one exact
// text per value, whatever form the trigger wrote it in: Kestra 2.x's six
// fraction digits and 1.x's fewest, a timestamptz in the worker JVM's zone
// (Z or +01:00), Debezium's {scale, value} numeric, an upper-case UUID.
func TestSourceTypeText(t *testing.T) {
	m, err := mapping.Parse("m.yaml", []byte(`source: {database: shop, schema: public, table: everything}
target: {table: x}
key: [id]
columns:
  - {name: id, type: Int64}
  - {name: at, type: String, source_type: timestamp}
  - {name: at_tz, type: Nullable(String), source_type: timestamp with time zone}
  - {name: day, type: String, source_type: date}
  - {name: num, type: String, source_type: numeric}
  - {name: uid, type: String, source_type: uuid}
`))
	if err != nil {
		t.Fatal(err)
	}
	row := func(at, atTZ, day, num, uid any) iongen.Struct {
		return iongen.Struct{{"id", int64(1)}, {"at", at}, {"at_tz", atTZ}, {"day", day}, {"num", num}, {"uid", uid}}
	}
	const want = `{"id": 1, "at": "2024-01-02 03:04:05.000000", "at_tz": "2024-02-29 07:04:56.123456", "day": "1900-01-01", "num": "0.00000000000000000001", "uid": "ffffffff-0000-0000-0000-00000000000f", "_cdc_lsn": 5, "_cdc_deleted": 0}`
	for _, tt := range []struct {
		name string
		row  iongen.Struct
		want string
	}{
		{"Kestra 2.x", row("2024-01-02T03:04:05.000000Z", "2024-02-29T07:04:56.123456Z", "1900-01-01",
			iongen.Struct{{"scale", int64(20)}, {"value", iongen.Blob{0x01}}}, "ffffffff-0000-0000-0000-00000000000f"), want},
		{"Kestra 1.x, Europe/Paris worker", row("2024-01-02T03:04:05Z", "2024-02-29T08:04:56.123456+01:00", iongen.Day(1900, 1, 1),
			iongen.Decimal("1d-20"), "FFFFFFFF-0000-0000-0000-00000000000F"), want},
		{"numeric text", row("1969-12-31T23:59:59.999999Z", nil, "2149-06-07", iongen.Struct{{"scale", int64(0)}, {"value", iongen.Blob{0xF3, 0x60, 0xD3, 0x63, 0x2F, 0xB9, 0x8B, 0x12, 0x15, 0xC0, 0x00, 0x00, 0x00}}}, "00000000-0000-0000-0000-000000000001"),
			`{"id": 1, "at": "1969-12-31 23:59:59.999999", "at_tz": null, "day": "2149-06-07", "num": "-1000000000000000000000000000000", "uid": "00000000-0000-0000-0000-000000000001", "_cdc_lsn": 5, "_cdc_deleted": 0}`},
		{"numeric with a scale", row("2024-01-02T03:04:05Z", nil, "2024-01-02", iongen.Decimal("-12.50"), "00000000-0000-0000-0000-000000000001"),
			`{"id": 1, "at": "2024-01-02 03:04:05.000000", "at_tz": null, "day": "2024-01-02", "num": "-12.50", "uid": "00000000-0000-0000-0000-000000000001", "_cdc_lsn": 5, "_cdc_deleted": 0}`},
	} {
		for _, f := range forms() {
			t.Run(tt.name+"/"+f.name, func(t *testing.T) {
				for _, ionOnly := range []bool{false, true} {
					path := writeFile(t, "changes.ion", encode(t, f.binary, everythingEvent(tt.row, 5)))
					b, err := decodeFileWith(context.Background(), path, m, decodeOptions{workers: 1, ionOnly: ionOnly})
					if err != nil {
						t.Fatal(err)
					}
					if got := strings.TrimSuffix(jsonLines(b), "\n"); got != tt.want {
						t.Errorf("ionOnly=%v\n got %s\nwant %s", ionOnly, got, tt.want)
					}
				}
			})
		}
	}
	for _, tt := range []struct {
		column string
		value  any
		want   string
	}{
		{"at", "2024-01-02T03:04:05.1234567Z", "2024-01-02T03:04:05.1234567Z has more sub-second digits than a PostgreSQL timestamp's microseconds"},
		{"at", "10000-01-01T00:00:00Z", "the string is not an ISO 8601 date-time"},
		{"at", int64(5), "expected a string holding an ISO 8601 date-time for a PostgreSQL timestamp in String, got an Ion int"},
		{"day", "+10000-01-01", "the string is not a date YYYY-MM-DD"},
		{"num", 1.5, "expected an Ion decimal, int or {scale, value} struct for a PostgreSQL numeric in String, got an Ion float"},
		{"uid", "", "the string is not a UUID"},
	} {
		t.Run("refused "+tt.column, func(t *testing.T) {
			r := row("2024-01-02T03:04:05Z", nil, "2024-01-02", int64(1), "00000000-0000-0000-0000-000000000001")
			for i := range r {
				if r[i].Name == tt.column {
					r[i].Value = tt.value
				}
			}
			_, err := decodeBytes(t, m, encode(t, true, everythingEvent(r, 5)), 1)
			var re *change.RecordError
			if !errors.As(err, &re) || re.Column != tt.column || !errors.Is(err, change.ErrBadValue) || !strings.HasSuffix(err.Error(), ": "+tt.want) {
				t.Errorf("error\n got %v\nwant column %q: …: %s", err, tt.column, tt.want)
			}
		})
	}
}
