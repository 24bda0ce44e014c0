package pyjson

import (
	"encoding/json"
	"math"
	"strconv"
	"testing"
	"unicode/utf8"
)

func TestPythonFloatRepr(t *testing.T) {
	// Each right-hand side is what Python 3 prints for json.dumps(float).
	tests := []struct {
		f    float64
		want string
	}{
		{0, "0.0"}, {math.Copysign(0, -1), "-0.0"}, {1, "1.0"}, {-1.5, "-1.5"}, {100, "100.0"},
		{1e15, "1000000000000000.0"}, {1e16, "1e+16"}, {123456789012345678, "1.2345678901234568e+17"},
		{0.0001, "0.0001"}, {0.00001, "1e-05"}, {2.5e-5, "2.5e-05"}, {1e-7, "1e-07"}, {0.1, "0.1"},
		{3.200000047683716, "3.200000047683716"}, {1234.5678, "1234.5678"}, {9999999999999998, "9999999999999998.0"},
		{math.MaxFloat64, "1.7976931348623157e+308"}, {5e-324, "5e-324"}, {1e100, "1e+100"},
		{math.NaN(), "NaN"}, {math.Inf(1), "Infinity"}, {math.Inf(-1), "-Infinity"},
	}
	for _, tt := range tests {
		if got := string(AppendFloat(nil, tt.f)); got != tt.want {
			t.Errorf("AppendFloat(%v) = %s, want %s", tt.f, got, tt.want)
		}
	}
}

func TestPythonStringEscapes(t *testing.T) {
	// json.dumps(s, ensure_ascii=False) for each input.
	tests := map[string]string{
		"plain":            `"plain"`,
		"q\"b\\s/<a&b>":    `"q\"b\\s/<a&b>"`,
		"t\tn\nr\rb\bf\f":  `"t\tn\nr\rb\bf\f"`,
		"\x01\x1f\x7f":     `"\u0001\u001f` + "\x7f" + `"`,
		"ls\u2028ps\u2029": "\"ls\u2028ps\u2029\"",
		"😀é":               "\"😀é\"",
		"bad\xffbyte":      "\"bad\ufffdbyte\"",
	}
	for in, want := range tests {
		if got := string(AppendString(nil, in)); got != want {
			t.Errorf("AppendString(%q) = %s, want %s", in, got, want)
		}
	}
}

// FuzzAppend: a float reads back as itself, and a UTF-8 string decodes back
// as itself from the JSON AppendString writes.
func FuzzAppend(f *testing.F) {
	f.Add(1.5, "plain")
	f.Add(1e16, "q\"b\\s\x01\u2028")
	f.Add(5e-324, "😀é")
	f.Fuzz(func(t *testing.T, x float64, s string) {
		got := string(AppendFloat(nil, x))
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			back, err := strconv.ParseFloat(got, 64)
			if err != nil || back != x || math.Signbit(back) != math.Signbit(x) {
				t.Fatalf("AppendFloat(%v) = %s reads back as %v, %v", x, got, back, err)
			}
		}
		if !utf8.ValidString(s) {
			return
		}
		var back string
		if err := json.Unmarshal(AppendString(nil, s), &back); err != nil || back != s {
			t.Fatalf("AppendString(%q) = %s reads back as %q, %v", s, AppendString(nil, s), back, err)
		}
	})
}
