// Package pyjson writes JSON scalars exactly as Python's json.dumps(...,
// ensure_ascii=False) does, so that output files stay byte-identical to the
// seed scripts' (expected.jsonl, pending.jsonl).
package pyjson

import (
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// namedEscapes holds, for each ASCII byte json.dumps escapes by name, the
// letter written after the backslash (Python's ESCAPE_DCT); 0 for the rest.
var namedEscapes = [utf8.RuneSelf]byte{'"': '"', '\\': '\\', '\n': 'n', '\r': 'r', '\t': 't', '\b': 'b', '\f': 'f'}

// AppendString appends s as Python's json.dumps(s, ensure_ascii=False):
// '"', '\\', \n, \r, \t, \b, \f escaped by name, other C0 controls as
// \u00XX, everything else (DEL, U+2028 included) as UTF-8. Bytes that are
// not UTF-8 become U+FFFD (Python strings cannot hold them).
func AppendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case namedEscapes[c] != 0:
				dst = append(dst, '\\', namedEscapes[c])
			case c < 0x20:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, "\uFFFD"...)
		} else {
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return append(dst, '"')
}

// AppendFloat appends f as Python's json.dumps does (float.__repr__):
// the shortest round-trip digits, fixed notation for exponents -4..15 with
// ".0" for whole numbers, else d.ddde+XX; NaN, Infinity and -Infinity.
func AppendFloat(dst []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(dst, "NaN"...)
	case math.IsInf(f, 1):
		return append(dst, "Infinity"...)
	case math.IsInf(f, -1):
		return append(dst, "-Infinity"...)
	}
	if f == 0 {
		if math.Signbit(f) {
			return append(dst, "-0.0"...)
		}
		return append(dst, "0.0"...)
	}
	// Shortest digits and decimal exponent.
	e := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX
	neg := e[0] == '-'
	if neg {
		e = e[1:]
	}
	mant, expStr, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expStr)
	digits := strings.Replace(mant, ".", "", 1)
	if neg {
		dst = append(dst, '-')
	}
	if exp >= -4 && exp < 16 {
		if exp >= 0 {
			if len(digits) <= exp+1 {
				dst = append(dst, digits...)
				for range exp + 1 - len(digits) {
					dst = append(dst, '0')
				}
				return append(dst, ".0"...)
			}
			dst = append(dst, digits[:exp+1]...)
			dst = append(dst, '.')
			return append(dst, digits[exp+1:]...)
		}
		dst = append(dst, "0."...)
		for range -exp - 1 {
			dst = append(dst, '0')
		}
		return append(dst, digits...)
	}
	dst = append(dst, digits[0])
	if len(digits) > 1 {
		dst = append(dst, '.')
		dst = append(dst, digits[1:]...)
	}
	dst = append(dst, 'e')
	if exp < 0 {
		dst = append(dst, '-')
		exp = -exp
	} else {
		dst = append(dst, '+')
	}
	if exp < 10 {
		dst = append(dst, '0')
	}
	return strconv.AppendInt(dst, int64(exp), 10)
}
