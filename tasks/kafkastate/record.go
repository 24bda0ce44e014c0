package kafkastate

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/changesink/changesink/internal/outcome"
)

// Limits of the value validator, chosen to match what the seed's Python and
// PostgreSQL's jsonb accept.
const (
	// maxDepth is the deepest nesting of arrays and objects accepted. The
	// seed's json.loads raises RecursionError at about 1000 levels (Python's
	// default recursion limit); PostgreSQL's jsonb accepts more.
	maxDepth = 1000
	// maxIntDigits is the most digits an integer (a number without fraction
	// or exponent) may have: Python's int() refuses longer strings
	// (sys.int_info.default_max_str_digits, Python 3.11+), so the seed's
	// json.loads raises on them.
	maxIntDigits = 4300
	// maxNumericScale is PostgreSQL's NUMERIC_DSCALE_MAX: the most digits
	// after the decimal point a jsonb number may have.
	maxNumericScale = 16383
	// maxNumericExponent is the smallest exponent PostgreSQL's numeric
	// input refuses ("value overflows numeric format": numeric_in allows
	// |exponent| < INT_MAX/2). Only a zero mantissa gets there without
	// overflowing a float64 first.
	maxNumericExponent = 1<<30 - 1
)

// problemKind says whether a refused value is not JSON at all (kindSyntax)
// or is JSON that the seed's json.loads or PostgreSQL's jsonb refuses
// (kindSemantic).
type problemKind int

const (
	kindSyntax problemKind = iota
	kindSemantic
)

// problem is why a key or value is refused: the sentinel of the rule, and
// where in the bytes it is.
type problem struct {
	rule   error
	detail string
	kind   problemKind
}

func (p *problem) Error() string { return p.rule.Error() + " (" + p.detail + ")" }
func (p *problem) Unwrap() error { return p.rule }

// validateKey checks a record key against the seed's rules: not null
// (ErrNullKey), valid UTF-8 (ErrKeyNotUTF8, the seed's key.decode('utf-8')),
// and free of NUL bytes (ErrKeyNUL: PostgreSQL text cannot hold them). An
// empty key is a key. The error unwraps to the rule's sentinel.
func validateKey(key []byte) error {
	if p := checkKey(key); p != nil {
		return p
	}
	return nil
}

func checkKey(key []byte) *problem {
	switch {
	case key == nil:
		return &problem{rule: ErrNullKey, detail: "the record has no key", kind: kindSemantic}
	case !utf8.Valid(key):
		return &problem{rule: ErrKeyNotUTF8, detail: fmt.Sprintf("invalid byte at %d", invalidUTF8At(key)), kind: kindSyntax}
	}
	if i := bytes.IndexByte(key, 0); i >= 0 {
		return &problem{rule: ErrKeyNUL, detail: fmt.Sprintf("nul byte at %d", i), kind: kindSemantic}
	}
	return nil
}

// validateValue checks a non-null record value the way the seed's
// json.loads(value.decode('utf-8'), parse_constant=invalid_constant)
// followed by PostgreSQL's jsonb input does, in one pass and without
// decoding it. It returns nil or an error that unwraps to:
//
//   - ErrValueNotUTF8: not valid UTF-8 (value.decode('utf-8') raises);
//   - ErrValueNotJSON: not exactly one RFC 8259 JSON text (empty, a UTF-8
//     byte order mark, trailing data, ...); or a string with a \u0000 escape
//     or an unpaired surrogate escape (json.loads accepts them, jsonb
//     refuses them); or an integer longer than 4300 digits (Python's int()
//     refuses it); or nesting deeper than 1000 (json.loads raises
//     RecursionError); or a number PostgreSQL numeric cannot hold (more
//     than 16383 digits after the point, or a zero with an exponent of
//     1073741823 or more, which the seed reads as 0.0);
//   - ErrNonFinite: NaN, Infinity or -Infinity (the seed's parse_constant),
//     or a number with a fraction or exponent that overflows a float64 (the
//     seed's json.loads turns it into inf, which jsonb refuses).
//
// Accepted values are passed to jsonb as written, so numbers keep every
// digit (the seed round-trips through a Python float), duplicate object keys
// keep the last value (as both json.loads and jsonb do), and -0 is stored as
// jsonb stores it (0).
func validateValue(value []byte) error {
	if p := checkValue(value); p != nil {
		return p
	}
	return nil
}

func checkValue(b []byte) *problem {
	if !utf8.Valid(b) {
		return &problem{rule: ErrValueNotUTF8, detail: fmt.Sprintf("invalid byte at %d", invalidUTF8At(b)), kind: kindSyntax}
	}
	s := jsonScanner{b: b}
	return s.scan()
}

func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(b)
}

// jsonScanner validates one JSON text iteratively (no recursion, so the
// depth limit is the only bound on nesting).
type jsonScanner struct {
	b     []byte
	i     int
	stack []byte // '{' or '[' per open container
}

func (s *jsonScanner) syntax(format string, args ...any) *problem {
	return &problem{rule: ErrValueNotJSON, detail: fmt.Sprintf(format, args...), kind: kindSyntax}
}

func (s *jsonScanner) unexpected() *problem {
	if s.i >= len(s.b) {
		return s.syntax("unexpected end at byte %d", s.i)
	}
	r, _ := utf8.DecodeRune(s.b[s.i:])
	return s.syntax("unexpected %q at byte %d", r, s.i)
}

func (s *jsonScanner) skipSpace() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *jsonScanner) scan() *problem {
	if bytes.HasPrefix(s.b, []byte("\xef\xbb\xbf")) {
		return s.syntax("starts with a UTF-8 byte order mark")
	}
	s.skipSpace()
	if s.i == len(s.b) {
		return s.syntax("empty value; a tombstone is a null value, not an empty one")
	}
	for {
		// A value starts at s.i (after whitespace).
		if p := s.value(); p != nil {
			return p
		}
		// After a value: close containers or move to the next element.
		for {
			s.skipSpace()
			if len(s.stack) == 0 {
				if s.i != len(s.b) {
					return s.syntax("data after the JSON value at byte %d", s.i)
				}
				return nil
			}
			if s.i >= len(s.b) {
				return s.unexpected()
			}
			top := s.stack[len(s.stack)-1]
			c := s.b[s.i]
			if (top == '{' && c == '}') || (top == '[' && c == ']') {
				s.stack = s.stack[:len(s.stack)-1]
				s.i++
				continue
			}
			if c != ',' {
				return s.unexpected()
			}
			s.i++
			s.skipSpace()
			if top == '{' {
				if p := s.member(); p != nil {
					return p
				}
			}
			break
		}
		s.skipSpace()
	}
}

// member reads `"name" :` and leaves s.i at the member's value.
func (s *jsonScanner) member() *problem {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return s.unexpected()
	}
	if p := s.str(); p != nil {
		return p
	}
	s.skipSpace()
	if s.i >= len(s.b) || s.b[s.i] != ':' {
		return s.unexpected()
	}
	s.i++
	s.skipSpace()
	return nil
}

// value reads one value starting at s.i. For '{' and '[' it only opens the
// container (and reads the first member name), leaving the elements to scan.
func (s *jsonScanner) value() *problem {
	for {
		if s.i >= len(s.b) {
			return s.unexpected()
		}
		switch c := s.b[s.i]; {
		case c == '{' || c == '[':
			if len(s.stack) == maxDepth {
				return &problem{rule: ErrValueNotJSON, kind: kindSemantic,
					detail: fmt.Sprintf("nested deeper than %d levels at byte %d (the seed's json.loads raises RecursionError)", maxDepth, s.i)}
			}
			s.stack = append(s.stack, c)
			s.i++
			s.skipSpace()
			if s.i < len(s.b) && ((c == '{' && s.b[s.i] == '}') || (c == '[' && s.b[s.i] == ']')) {
				s.stack = s.stack[:len(s.stack)-1]
				s.i++
				return nil
			}
			if c == '{' {
				if p := s.member(); p != nil {
					return p
				}
			}
			continue // the first element's value
		case c == '"':
			return s.str()
		case c == '-' || (c >= '0' && c <= '9'):
			return s.number()
		case c == 't':
			return s.literal("true")
		case c == 'f':
			return s.literal("false")
		case c == 'n':
			return s.literal("null")
		case c == 'N' || c == 'I':
			return s.nonFinite()
		default:
			return s.unexpected()
		}
	}
}

func (s *jsonScanner) literal(word string) *problem {
	if !bytes.HasPrefix(s.b[s.i:], []byte(word)) {
		return s.syntax("invalid literal at byte %d (expected %s)", s.i, word)
	}
	s.i += len(word)
	return nil
}

func (s *jsonScanner) nonFinite() *problem {
	for _, w := range []string{"NaN", "Infinity", "-Infinity"} {
		if bytes.HasPrefix(s.b[s.i:], []byte(w)) {
			return &problem{rule: ErrNonFinite, kind: kindSemantic, detail: fmt.Sprintf("%s at byte %d", w, s.i)}
		}
	}
	return s.unexpected()
}

// number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? and applies
// the seed's limits: integers up to maxIntDigits digits; numbers with a
// fraction or exponent must be finite as a float64.
func (s *jsonScanner) number() *problem {
	start := s.i
	if s.b[s.i] == '-' {
		s.i++
		if s.i < len(s.b) && s.b[s.i] == 'I' {
			s.i--
			return s.nonFinite()
		}
	}
	digits := func() int {
		n := 0
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
			n++
		}
		return n
	}
	if s.i >= len(s.b) {
		return s.unexpected()
	}
	var intDigits int
	switch c := s.b[s.i]; {
	case c == '0':
		s.i++
		intDigits = 1
	case c >= '1' && c <= '9':
		intDigits = digits()
	default:
		return s.unexpected()
	}
	isFloat := false
	fracDigits := 0
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if fracDigits = digits(); fracDigits == 0 {
			return s.unexpected()
		}
		isFloat = true
	}
	exp := 0
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		neg := false
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			neg = s.b[s.i] == '-'
			s.i++
		}
		expStart := s.i
		if digits() == 0 {
			return s.unexpected()
		}
		for _, c := range s.b[expStart:s.i] {
			exp = min(exp*10+int(c-'0'), 1<<30) // clamped: beyond every limit below
		}
		if neg {
			exp = -exp
		}
		isFloat = true
	}
	// A digit right after "0" ("01") is left for the caller, which reports
	// it as data after the value, as json.loads does.
	text := s.b[start:s.i]
	if !isFloat {
		if intDigits > maxIntDigits {
			return &problem{rule: ErrValueNotJSON, kind: kindSemantic,
				detail: fmt.Sprintf("integer with %d digits at byte %d; the seed's Python refuses more than %d", intDigits, start, maxIntDigits)}
		}
		return nil
	}
	// Python's float() rounds correctly, as strconv.ParseFloat does, so
	// both overflow to infinity on exactly the same inputs.
	f, err := strconv.ParseFloat(string(text), 64)
	if math.IsInf(f, 0) {
		return &problem{rule: ErrNonFinite, kind: kindSemantic,
			detail: fmt.Sprintf("number at byte %d overflows a float64 (the seed reads it as inf)", start)}
	}
	// PostgreSQL's numeric keeps at most 16383 digits after the decimal
	// point (NUMERIC_DSCALE_MAX); jsonb refuses more with "value overflows
	// numeric format". The seed's float would have rounded such a number to
	// 0.0; changesink stores numbers exactly, so it must refuse them.
	if exp >= maxNumericExponent {
		return &problem{rule: ErrValueNotJSON, kind: kindSemantic,
			detail: fmt.Sprintf("number at byte %d has an exponent beyond PostgreSQL numeric", start)}
	}
	if fracDigits-exp > maxNumericScale {
		return &problem{rule: ErrValueNotJSON, kind: kindSemantic,
			detail: fmt.Sprintf("number at byte %d needs more than %d digits after the decimal point, beyond PostgreSQL numeric", start, maxNumericScale)}
	}
	if err != nil && !isRangeErr(err) {
		return s.syntax("number at byte %d: %v", start, err)
	}
	return nil
}

func isRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

// str reads a string starting at the opening quote, refusing raw control
// characters, unknown escapes, \u0000 and unpaired surrogate escapes.
func (s *jsonScanner) str() *problem {
	start := s.i
	s.i++ // opening quote
	for {
		// Fast path over ordinary bytes.
		for s.i < len(s.b) {
			c := s.b[s.i]
			if c == '"' || c == '\\' || c < 0x20 {
				break
			}
			s.i++
		}
		if s.i >= len(s.b) {
			return s.syntax("unterminated string starting at byte %d", start)
		}
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return nil
		case c < 0x20:
			return s.syntax("control character %#02x in a string at byte %d", c, s.i)
		}
		// Backslash.
		if s.i+1 >= len(s.b) {
			return s.syntax("unterminated escape at byte %d", s.i)
		}
		switch s.b[s.i+1] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			s.i += 2
			continue
		case 'u':
		default:
			return s.syntax("invalid escape at byte %d", s.i)
		}
		at := s.i
		r, ok := s.hex4(s.i + 2)
		if !ok {
			return s.syntax("invalid \\u escape at byte %d", at)
		}
		s.i += 6
		switch {
		case r == 0:
			return &problem{rule: ErrValueNotJSON, kind: kindSemantic,
				detail: fmt.Sprintf("\\u0000 escape at byte %d, which PostgreSQL jsonb cannot store", at)}
		case r >= 0xdc00 && r <= 0xdfff:
			return &problem{rule: ErrValueNotJSON, kind: kindSemantic,
				detail: fmt.Sprintf("unpaired low surrogate escape at byte %d, which PostgreSQL jsonb refuses", at)}
		case r >= 0xd800 && r <= 0xdbff:
			if s.i+1 < len(s.b) && s.b[s.i] == '\\' && s.b[s.i+1] == 'u' {
				if lo, ok := s.hex4(s.i + 2); ok && lo >= 0xdc00 && lo <= 0xdfff {
					s.i += 6
					continue
				}
			}
			return &problem{rule: ErrValueNotJSON, kind: kindSemantic,
				detail: fmt.Sprintf("unpaired high surrogate escape at byte %d, which PostgreSQL jsonb refuses", at)}
		}
	}
}

func (s *jsonScanner) hex4(at int) (rune, bool) {
	if at+4 > len(s.b) {
		return 0, false
	}
	var r rune
	for _, c := range s.b[at : at+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	return r, true
}

// checkRecord applies validateKey and (unless the record is a tombstone)
// validateValue to one record, returning a *RecordError naming it, marked
// as a refusal.
func checkRecord(topic string, partition int32, offset int64, key, value []byte, tombstone bool) error {
	p := checkKey(key)
	if p == nil && !tombstone {
		p = checkValue(value)
	}
	if p == nil {
		return nil
	}
	return outcome.Refused.Mark(&RecordError{Topic: topic, Partition: partition, Offset: offset, Key: key, Err: p.rule, Detail: p.detail})
}
