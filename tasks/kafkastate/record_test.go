package kafkastate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/changesink/changesink/internal/testenv"
)

// TestValidateValue pins, value by value, what the seed's
// `json.loads(value.decode('utf-8'), parse_constant=invalid_constant)`
// followed by psycopg's Jsonb dump and PostgreSQL's jsonb input does, and
// what changesink does instead: refuse (with the sentinel of the rule) or
// accept and pass the raw text to jsonb.
func TestValidateValue(t *testing.T) {
	tests := []struct {
		name  string
		value string
		want  error // nil = accepted
	}{
		{"object", `{"id":1,"name":"Ada"}`, nil},
		{"array", `[1,2,3]`, nil},
		{"top-level string", `"x"`, nil},
		{"top-level number", `42`, nil},
		{"json null is a value, not a tombstone", `null`, nil},
		{"true", `true`, nil},
		{"surrounding whitespace", " \t\r\n{\"a\": [ ]} \n", nil},
		{"nested", `{"a":{"b":[{"c":[[],{}]}]}}`, nil},
		{"negative zero int", `-0`, nil},
		{"negative zero float", `-0.0`, nil},
		{"integer beyond 64 bits kept exactly", `{"n":123456789012345678901234567890}`, nil},
		{"4300-digit integer (the seed's Python limit)", strings.Repeat("9", 4300), nil},
		{"largest float", `1.7976931348623157e308`, nil},
		{"float underflow to zero", `1e-400`, nil},
		{"duplicate keys (last wins, as in json.loads and jsonb)", `{"a":1,"a":2}`, nil},
		{"escapes", `"\" \\ \/ \b \f \n \r \t \u00e9 \ud83d\ude00"`, nil},
		{"raw utf-8", `{"name":"Zoë 😀"}`, nil},

		{"empty value (json.loads('') fails)", ``, ErrValueNotJSON},
		{"only whitespace", "  \n", ErrValueNotJSON},
		{"utf-8 BOM (json.loads raises on a BOM)", "\ufeff{}", ErrValueNotJSON},
		{"not json", `hello`, ErrValueNotJSON},
		{"trailing data", `{} {}`, ErrValueNotJSON},
		{"trailing comma", `[1,]`, ErrValueNotJSON},
		{"single quotes", `{'a':1}`, ErrValueNotJSON},
		{"leading zero", `01`, ErrValueNotJSON},
		{"leading plus", `+1`, ErrValueNotJSON},
		{"bare dot", `1.`, ErrValueNotJSON},
		{"dot first", `.5`, ErrValueNotJSON},
		{"exponent without digits", `1e`, ErrValueNotJSON},
		{"unterminated string", `"abc`, ErrValueNotJSON},
		{"unterminated object", `{"a":1`, ErrValueNotJSON},
		{"missing colon", `{"a" 1}`, ErrValueNotJSON},
		{"non-string key", `{1:2}`, ErrValueNotJSON},
		{"raw control character in string", "\"a\tb\"", ErrValueNotJSON},
		{"bad escape", `"\x41"`, ErrValueNotJSON},
		{"short unicode escape", `"\u12"`, ErrValueNotJSON},
		{"mismatched brackets", `[}`, ErrValueNotJSON},
		{"literal typo", `nul`, ErrValueNotJSON},
		{"nul escape (jsonb cannot store \\u0000)", `{"a":"\u0000"}`, ErrValueNotJSON},
		{"lone high surrogate (jsonb refuses)", `"\ud800"`, ErrValueNotJSON},
		{"lone low surrogate (jsonb refuses)", `"\udc00"`, ErrValueNotJSON},
		{"high surrogate then non-surrogate", `"\ud800\u0041"`, ErrValueNotJSON},
		{"integer over 4300 digits (json.loads raises)", strings.Repeat("9", 4301), ErrValueNotJSON},
		{"too deep", strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1), ErrValueNotJSON},
		{"not utf-8", "\"\xff\"", ErrValueNotUTF8},
		{"utf-8 encoded surrogate", "\"\xed\xa0\x80\"", ErrValueNotUTF8},
		{"overlong utf-8", "\"\xc0\xaf\"", ErrValueNotUTF8},

		{"NaN", `{"x":NaN}`, ErrNonFinite},
		{"Infinity", `[Infinity]`, ErrNonFinite},
		{"-Infinity", `-Infinity`, ErrNonFinite},
		{"1e400 (json.loads gives inf, jsonb refuses Infinity)", `1e400`, ErrNonFinite},
		{"-1e400", `{"a":-1e400}`, ErrNonFinite},
		{"just over the largest float", `1.7976931348623159e308`, ErrNonFinite},
		{"310-digit float", strings.Repeat("9", 310) + ".0", ErrNonFinite},
		{"scale beyond PostgreSQL numeric (1e-20000)", `1e-20000`, ErrValueNotJSON},
		{"16384 fraction digits", "0." + strings.Repeat("1", 16384), ErrValueNotJSON},
		{"huge negative exponent", `1e-99999999999999999999`, ErrValueNotJSON},
		{"16383 fraction digits fit", "0." + strings.Repeat("1", 16383), nil},
		{"scale 16383 via exponent", `1e-16383`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantValidated(t, fmt.Sprintf("validateValue(%.40q)", tt.value), validateValue([]byte(tt.value)), tt.want)
		})
	}
}

// wantValidated fails t unless got, what call returned, is nil when want
// is (accepted) or wraps want.
func wantValidated(t *testing.T, call string, got, want error) {
	t.Helper()
	switch {
	case want == nil && got != nil:
		t.Fatalf("%s = %v, want accepted", call, got)
	case want != nil && !errors.Is(got, want):
		t.Fatalf("%s = %v, want %v", call, got, want)
	}
}

func TestValidateValueMatchesGoForPlainJSON(t *testing.T) {
	// Every accepted value is valid JSON for Go too, and the deepest
	// accepted nesting is exactly maxDepth.
	deep := strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth)
	if err := validateValue([]byte(deep)); err != nil {
		t.Fatalf("depth %d refused: %v", maxDepth, err)
	}
	if !json.Valid([]byte(deep)) {
		t.Fatal("json.Valid refused the deep value")
	}
}

func TestValidateKey(t *testing.T) {
	tests := []struct {
		name string
		key  []byte
		want error
	}{
		{"ascii", []byte("customer-1"), nil},
		{"empty key is a key", []byte{}, nil},
		{"utf-8", []byte("Zoë"), nil},
		{"null key", nil, ErrNullKey},
		{"invalid utf-8", []byte{'a', 0xff}, ErrKeyNotUTF8},
		{"nul byte (postgres text cannot hold it)", []byte("a\x00b"), ErrKeyNUL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantValidated(t, fmt.Sprintf("validateKey(%q)", tt.key), validateKey(tt.key), tt.want)
		})
	}
}

func TestRecordErrorNamesWhere(t *testing.T) {
	err := checkRecord("customers", 3, 1234, []byte("k\xff"), []byte("{}"), false)
	var re *RecordError
	if !errors.As(err, &re) {
		t.Fatalf("checkRecord = %v, want *RecordError", err)
	}
	msg := err.Error() + "\nhint: " + Hint(err)
	for _, want := range []string{`topic "customers"`, "partition 3", "offset 1234", `key "k\xff"`, "not valid utf-8", "re-run", "UTF-8 text"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if err := checkRecord("t", 0, 1, []byte("k"), nil, true); err != nil {
		t.Errorf("tombstone refused: %v", err)
	}
}

// TestValidateValueFixtures runs the files under testdata/values: each file
// name starts with "ok-" (accepted) or with the rule it breaks.
func TestValidateValueFixtures(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "values", "*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	rules := map[string]error{"notjson": ErrValueNotJSON, "nonfinite": ErrNonFinite, "notutf8": ErrValueNotUTF8}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b := testenv.ReadFile(t, f)
			prefix, _, _ := strings.Cut(filepath.Base(f), "-")
			got := validateValue(b)
			if prefix == "ok" {
				if got != nil {
					t.Fatalf("got %v, want accepted", got)
				}
				return
			}
			want, ok := rules[prefix]
			if !ok {
				t.Fatalf("fixture prefix %q is not ok/notjson/nonfinite/notutf8", prefix)
			}
			if !errors.Is(got, want) {
				t.Fatalf("got %v, want %v", got, want)
			}
		})
	}
}

// FuzzValidateValue states the validator's invariants: it never panics;
// whatever it accepts is valid UTF-8 and valid JSON for encoding/json;
// invalid UTF-8 is always ErrValueNotUTF8 (encoding/json accepts it inside
// strings, the seed's decode('utf-8') does not); and
// when it refuses JSON that encoding/json accepts, the reason is one of the
// documented seed/jsonb rules (non-finite number, \u0000, unpaired
// surrogate, over-long integer, nesting depth), never a parsing disagreement.
func FuzzValidateValue(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `[1e400]`, `"\u0000"`, `"\ud800"`, "\ufeff{}", `NaN`, `-Infinity`,
		`{"a":[true,false,null,-0.5e-3,"x"]}`, `01`, "", `"\ud83d\ude00"`, strings.Repeat("[", 30)} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p := checkValue(b)
		if p == nil {
			if !json.Valid(b) || !utf8.Valid(b) {
				t.Fatalf("accepted %q, which encoding/json refuses", b)
			}
			return
		}
		if p.rule == nil || p.detail == "" {
			t.Fatalf("refusal without rule or detail for %q: %+v", b, p)
		}
		if !utf8.Valid(b) {
			if p.rule != ErrValueNotUTF8 {
				t.Fatalf("refused invalid UTF-8 %q with %v, want ErrValueNotUTF8", b, p.rule)
			}
			return
		}
		if json.Valid(b) && p.kind == kindSyntax {
			t.Fatalf("refused %q as a syntax error (%s), but encoding/json accepts it", b, p.detail)
		}
	})
}

func FuzzValidateKey(f *testing.F) {
	f.Add([]byte("k"))
	f.Add([]byte{0xff})
	f.Add([]byte("a\x00"))
	f.Fuzz(func(t *testing.T, k []byte) {
		err := validateKey(k)
		if err == nil && (k == nil || bytes.IndexByte(k, 0) >= 0 || !utf8.Valid(k)) {
			t.Fatalf("accepted key %q", k)
		}
		if err != nil && k != nil && bytes.IndexByte(k, 0) < 0 && utf8.Valid(k) {
			t.Fatalf("refused key %q: %v", k, err)
		}
	})
}

// BenchmarkValidateValue measures the validator on a 200-byte customer
// record, the shape of .ci/bench-kafka-state's records.
func BenchmarkValidateValue(b *testing.B) {
	v := []byte(`{"id":4711,"name":"Customer 0004711","email":"customer0004711@example.com","tier":"gold","balance":74307.11,"active":true,"tags":["a","b","c"],"city":"Lisbon","pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`)
	b.SetBytes(int64(len(v)))
	for b.Loop() {
		if err := validateValue(v); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkJSONValid is encoding/json's validator on the same value, for
// comparison.
func BenchmarkJSONValid(b *testing.B) {
	v := []byte(`{"id":4711,"name":"Customer 0004711","email":"customer0004711@example.com","tier":"gold","balance":74307.11,"active":true,"tags":["a","b","c"],"city":"Lisbon","pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`)
	b.SetBytes(int64(len(v)))
	for b.Loop() {
		if !json.Valid(v) {
			b.Fatal("invalid")
		}
	}
}

// TestZeroWithHugeExponent: a value holding 0e1073741823 passed the
// validator, then PostgreSQL refused it inside COPY ("value overflows
// numeric format"), so the run failed as an internal error naming no
// record. The seed stores it (json.loads reads 0.0). changesink stores
// numbers as written, so it must refuse the record up front, like the other
// numbers beyond PostgreSQL numeric.
func TestZeroWithHugeExponent(t *testing.T) {
	for _, v := range []string{`{"n":0e1073741823}`, `[0.0E+99999999999]`, `-0e1073741824`} {
		err := validateValue([]byte(v))
		if !errors.Is(err, ErrValueNotJSON) {
			t.Errorf("validateValue(%s) = %v, want ErrValueNotJSON", v, err)
		}
	}
	for _, v := range []string{`0e1073741822`, `{"n":0.0e1073741822}`} {
		if err := validateValue([]byte(v)); err != nil {
			t.Errorf("validateValue(%s) = %v, want nil (jsonb accepts it)", v, err)
		}
	}
}
