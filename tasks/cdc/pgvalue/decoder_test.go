package pgvalue

import (
	"errors"
	"strings"
	"testing"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
)

// isRefusal reports err matches want and, for a refused value, also
// change.ErrBadValue.
func isRefusal(err, want error) bool {
	if !errors.Is(err, want) {
		return false
	}
	switch want {
	case ErrSpecialValue, ErrOutOfRange, ErrWouldRound, ErrTooLong, ErrNotText:
		return errors.Is(err, change.ErrBadValue)
	}
	return true
}

// caseDecoders builds the decoder of every case.
func caseDecoders(t testing.TB, cases []textCase) []*Decoder {
	t.Helper()
	m := caseMapping(t, cases)
	ds := make([]*Decoder, len(cases))
	for i, c := range cases {
		d, err := NewDecoder(sourceColumn(t, "c", c.pg), &m.Cols[i+1])
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		ds[i] = d
	}
	return ds
}

// TestText reads every case's text (what the server prints:
// TestServerText) into its column.
func TestText(t *testing.T) {
	ds := caseDecoders(t, textCases)
	for i, c := range textCases {
		checkCase(t, c, ds[i], []byte(c.text))
	}
}

// TestTextKeepsNoBytes: a value holds no reference to the bytes it was
// read from (pgoutput's buffer is reused for the next message).
func TestTextKeepsNoBytes(t *testing.T) {
	ds := caseDecoders(t, textCases)
	for i, c := range textCases {
		if c.err != nil {
			continue
		}
		buf := []byte(c.text)
		got, err := ds[i].Text(buf)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for j := range buf {
			buf[j] = '#'
		}
		if !got.Equal(c.want) {
			t.Errorf("%s: the value changed with its input buffer: %+v", c.name, got)
		}
	}
}

func TestValueKinds(t *testing.T) {
	m := caseMapping(t, []textCase{{col: "Nullable(Int64)"}, {col: "Int64"}})
	nullable, err := NewDecoder(Column{Name: "a", TypeOID: 20, TypeMod: -1}, &m.Cols[1])
	if err != nil {
		t.Fatal(err)
	}
	required, err := NewDecoder(Column{Name: "b", TypeOID: 20, TypeMod: -1}, &m.Cols[2])
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		d    *Decoder
		kind byte
		data string
		want change.Value
		err  error
	}{
		{"text", required, 't', "42", change.Value{N: 42}, nil},
		{"NULL into Nullable", nullable, 'n', "", change.Value{Null: true}, nil},
		{"NULL into a column that is not Nullable", required, 'n', "", change.Value{}, change.ErrNotNullable},
		{"unchanged TOAST", required, 'u', "", change.Value{Toast: true}, nil},
		{"binary", required, 'b', "\x00\x00\x00\x00\x00\x00\x00\x2a", change.Value{}, ErrSettings},
		{"unknown kind", required, 'x', "42", change.Value{}, ErrNotText},
	} {
		got, err := tt.d.Value(tt.kind, []byte(tt.data))
		switch {
		case tt.err != nil && !isRefusal(err, tt.err):
			t.Errorf("%s: got %v, %v; want %v", tt.name, got, err, tt.err)
		case tt.err == nil && (err != nil || !got.Equal(tt.want) || got.Toast != tt.want.Toast):
			t.Errorf("%s: got %+v, %v; want %+v", tt.name, got, err, tt.want)
		}
	}
}

// TestNewDecoderRefuses: a mapping whose type cannot hold the source
// column's values, or whose source_type names another type, is refused
// before any value is read, naming the column and its type.
func TestNewDecoderRefuses(t *testing.T) {
	for _, tt := range []struct {
		name, pg, col, says string
	}{
		{"integer into Float64", "integer", "Float64", `column "c" (integer): the mapping does not fit the source column's type: Float64 cannot hold it; map it to Int8..Int64`},
		{"numeric into Float64", "numeric(12,2)", "Float64", "(numeric(12,2))"},
		{"double into Decimal", "double precision", "Decimal(38, 10)", "map it to Float64"},
		{"bool into UInt8", "boolean", "UInt8", "map it to Bool or String"},
		{"text into UUID", "text", "UUID", "map it to String"},
		{"varchar(8) into Int64", "varchar(8)", "Int64", "(varchar(8))"},
		{"timestamp into Date", "timestamp", "Date", "map it to DateTime64(6, 'UTC')"},
		{"date into DateTime", "date", "DateTime", "map it to Date"},
		{"timestamptz(3) into Int64", "timestamptz(3)", "Int64", "(timestamptz(3))"},
		{"interval into Int64", "interval", "Int64", "(interval): "},
		{"json into UUID", "json", "UUID", "map it to String"},
		{"uuid into Int64", "uuid", "Int64", "map it to UUID or String"},
		{"source_type of another type", "timestamp", "String|date", "the mapping's source_type is date"},
		{"source_type smallint of an integer", "integer", "Int32|smallint", "source_type is smallint"},
		{"source_type of a type held as text", "interval", "String|text", "source_type is text"},
	} {
		m := caseMapping(t, []textCase{{col: tt.col}})
		_, err := NewDecoder(sourceColumn(t, "c", tt.pg), &m.Cols[1])
		var ce *ColumnError
		if !errors.Is(err, ErrWrongType) || !errors.As(err, &ce) || ce.Column != "c" {
			t.Errorf("%s: got %v, want a *ColumnError of ErrWrongType", tt.name, err)
			continue
		}
		if !strings.Contains(err.Error(), tt.says) || len(err.Error()) > 200 {
			t.Errorf("%s: the message %q (%d characters) should say %q in at most 200", tt.name, err, len(err.Error()), tt.says)
		}
	}
}

// TestNotText: bytes PostgreSQL does not print for a type are refused as
// ErrNotText, never read as something else.
func TestNotText(t *testing.T) {
	for _, tt := range []struct {
		pg, col string
		texts   []string
	}{
		{"integer", "Int32", []string{"", "-", "+1", " 1", "1 ", "1.", "1e3", "0x1", "١"}},
		{"numeric", "Decimal(38, 10)", []string{"", ".5", "1.", "1.2.3", "1e5", "nan", "inf", "+1", "--1", "1_000"}},
		{"numeric", "String|numeric", []string{"", ".5", "1.", "NAN", "Inf"}},
		{"double precision", "Float64", []string{"", "inf", "+Inf", "nan", "0x1p-2", "1_0", "e", ".", "1e"}},
		{"boolean", "Bool", []string{"", "true", "T", "1", "yes"}},
		{"uuid", "UUID", []string{"", "a0eebc999c0b4ef8bb6d6bb9bd380a11", "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1g", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1"}},
		{"date", "Date", []string{"", "2024-02-30", "2023-02-29", "2024-13-01", "2024-00-01", "2024-01-00", "2024-1-01", "024-01-01", "0000-01-01", "2024-01-01 BC ", "04/03/1890", "2024-01-01 00:00:00", "Infinity"}},
		{"date", "String|date", []string{"2024-02-30", "04/03/1890", "1900-02-29"}},
		{"timestamp", dt64, []string{"", "2024-01-01", "2024-01-01T00:00:00", "2024-01-01 24:00:00", "2024-01-01 00:60:00", "2024-01-01 00:00:60",
			"2024-01-01 00:00:00.", "2024-01-01 00:00:00.1234567", "2024-01-01 00:00:00+00", "Mon Jan 01 00:00:00 2024", "2024-01-01 0:00:00"}},
		{"timestamptz", dt64, []string{"2024-01-01 00:00:00", "2024-01-01 00:00:00 UTC", "2024-01-01 00:00:00+1", "2024-01-01 00:00:00+01:60",
			"2024-01-01 00:00:00+01:00:00:00", "04/03/1890 06:53:32 LMT", "2024-01-01 00:00:00Z"}},
		{"timestamptz", "String|timestamptz", []string{"2024-01-01 00:00:00", "2024-01-01 00:00:00+x"}},
		{"bytea", "String", []string{"", `\x0`, `\xzz`, `\000\377A`, "abc", `\X00`}},
		{"text", "String", []string{"\xff", "a\xc3", "\xed\xa0\x80"}},
		{"interval", "String", []string{"\xff"}},
	} {
		m := caseMapping(t, []textCase{{col: tt.col}})
		d, err := NewDecoder(sourceColumn(t, "c", tt.pg), &m.Cols[1])
		if err != nil {
			t.Fatalf("%s into %s: %v", tt.pg, tt.col, err)
		}
		for _, text := range tt.texts {
			got, err := d.Text([]byte(text))
			if !isRefusal(err, ErrNotText) {
				t.Errorf("%s into %s: %q: got %+v, %v; want ErrNotText", tt.pg, tt.col, text, got, err)
			}
		}
	}
}

// TestZonedTextsAreInstants: a timestamptz printed under any TimeZone
// (local mean times with seconds included) reads as the same instant.
func TestZonedTextsAreInstants(t *testing.T) {
	m := caseMapping(t, []textCase{{col: dt64}, {col: "String|timestamptz"}})
	ticks, _ := NewDecoder(sourceColumn(t, "c", "timestamptz"), &m.Cols[1])
	text, _ := NewDecoder(sourceColumn(t, "c", "timestamptz"), &m.Cols[2])
	for _, tt := range []struct {
		texts []string
		want  string
	}{
		{[]string{"1890-03-04 10:00:00+00", "1890-03-04 06:53:32-03:06:28", "1890-03-04 10:19:32+00:19:32", "1890-03-04 15:21:10+05:21:10"}, "1890-03-04 10:00:00.000000"},
		{[]string{"2024-02-29 07:04:56.123456+00", "2024-02-29 12:34:56.123456+05:30", "2024-02-29 20:49:56.123456+13:45", "2024-02-29 03:34:56.123456-03:30"}, "2024-02-29 07:04:56.123456"},
		{[]string{"2000-01-01 00:00:00+00", "1999-12-31 23:00:00-01", "2000-01-01 00:00:00-00"}, "2000-01-01 00:00:00.000000"},
		{[]string{"0001-01-01 00:00:00+00", "0001-01-01 00:19:32+00:19:32", "0001-12-31 23:00:00-01 BC"}, "0001-01-01 00:00:00.000000"},
	} {
		var first change.Value
		for i, s := range tt.texts {
			got, err := text.Text([]byte(s))
			if err != nil || got.S != tt.want {
				t.Errorf("%q into String: got %q, %v; want %q", s, got.S, err, tt.want)
			}
			v, err := ticks.Text([]byte(s))
			if errors.Is(err, ErrOutOfRange) {
				continue
			}
			if err != nil {
				t.Errorf("%q: %v", s, err)
			}
			if i == 0 {
				first = v
			} else if !v.Equal(first) {
				t.Errorf("%q: got %+v, want %+v as %q", s, v, first, tt.texts[0])
			}
		}
	}
}

func TestCheckSettings(t *testing.T) {
	good := map[string]string{"DateStyle": "ISO, MDY", "IntervalStyle": "postgres", "extra_float_digits": "1",
		"bytea_output": "hex", "client_encoding": "UTF8", "TimeZone": "America/Sao_Paulo"}
	if err := CheckSettings(good); err != nil {
		t.Fatalf("good settings: %v", err)
	}
	if err := CheckSettings(Settings()); err != nil {
		t.Fatalf("Settings(): %v", err)
	}
	for _, tt := range []struct{ name, value, says string }{
		{"DateStyle", "SQL, DMY", `DateStyle is "SQL, DMY"; changesink needs ISO, MDY`},
		{"DateStyle", "Postgres, MDY", "DateStyle"},
		{"DateStyle", "German", "DateStyle"},
		{"IntervalStyle", "iso_8601", "IntervalStyle"},
		{"extra_float_digits", "0", "extra_float_digits"},
		{"extra_float_digits", "-15", "extra_float_digits"},
		{"bytea_output", "escape", "bytea_output"},
		{"client_encoding", "LATIN1", "client_encoding"},
		{"client_encoding", "", "client_encoding"},
	} {
		s := map[string]string{}
		for k, v := range good {
			s[k] = v
		}
		s[tt.name] = tt.value
		err := CheckSettings(s)
		if !errors.Is(err, ErrSettings) || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("%s = %q: got %v, want ErrSettings saying %q", tt.name, tt.value, err, tt.says)
		}
	}
	s := map[string]string{}
	for k, v := range good {
		if k != "bytea_output" {
			s[k] = v
		}
	}
	if err := CheckSettings(s); !errors.Is(err, ErrSettings) || !strings.Contains(err.Error(), "bytea_output was not read") {
		t.Errorf("a setting not read: got %v", err)
	}
}

// TestErrorsMatchTheirCauses: a refused value matches change.ErrBadValue
// and its narrower cause, and reads as their messages first (the
// runbook's heading), then the value.
func TestErrorsMatchTheirCauses(t *testing.T) {
	m := caseMapping(t, []textCase{{col: "Decimal(12, 2)"}})
	d, _ := NewDecoder(sourceColumn(t, "c", "numeric"), &m.Cols[1])
	_, err := d.Text([]byte("NaN"))
	if !errors.Is(err, change.ErrBadValue) || !errors.Is(err, ErrSpecialValue) || errors.Is(err, ErrOutOfRange) {
		t.Fatalf("got %v", err)
	}
	want := "value does not fit its column: NaN or infinity: numeric NaN does not fit Decimal(12, 2); map it to String with source_type: numeric"
	if err.Error() != want {
		t.Errorf("got %q, want %q", err, want)
	}
	_ = mapping.KindInt
}

// TestRefusalsNameTheNullableType: a refused value's message names the
// type to map the column to, Nullable when the column is: following it
// keeps the column's NULLs.
func TestRefusalsNameTheNullableType(t *testing.T) {
	for _, tt := range []struct {
		name, pg, col, text, says string
	}{
		{"numeric NaN", "numeric", "Decimal(12, 2)", "NaN", "; map it to String with source_type: numeric"},
		{"numeric NaN, Nullable", "numeric", "Nullable(Decimal(12, 2))", "NaN", "; map it to Nullable(String) with source_type: numeric"},
		{"a fraction in an integer, Nullable", "numeric", "Nullable(Int64)", "1.5", "; map it to Nullable(Decimal(P, S))"},
		{"a double in Float32, Nullable", "double precision", "Nullable(Float32)", "0.1", "; map the column to Nullable(Float64)"},
		{"date infinity, Nullable", "date", "Nullable(Date)", "infinity", "; map it to Nullable(String) with source_type: date"},
		{"date before 1970, Nullable", "date", "Nullable(Date)", "1969-12-31", "; map it to Nullable(String) with source_type: date"},
		{"timestamp infinity, Nullable", "timestamp", "Nullable(DateTime64(6, 'UTC'))", "infinity", "; map it to Nullable(String) with source_type: timestamp"},
		{"a fraction in DateTime", "timestamp", "DateTime('UTC')", "2024-01-01 00:00:00.5", "; map it to DateTime64(6, 'UTC')"},
		{"a fraction in DateTime, Nullable", "timestamp", "Nullable(DateTime('UTC'))", "2024-01-01 00:00:00.5", "; map it to Nullable(DateTime64(6, 'UTC'))"},
		{"beyond DateTime64, Nullable", "timestamp", "Nullable(DateTime64(6, 'UTC'))", "2400-01-01 00:00:00", "; map it to Nullable(String) with source_type: timestamp"},
	} {
		m := caseMapping(t, []textCase{{col: tt.col}})
		d, err := NewDecoder(sourceColumn(t, "c", tt.pg), &m.Cols[1])
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		_, err = d.Text([]byte(tt.text))
		if !errors.Is(err, change.ErrBadValue) || !strings.HasSuffix(err.Error(), tt.says) {
			t.Errorf("%s: got %v, want a refusal ending %q", tt.name, err, tt.says)
		}
	}
}
