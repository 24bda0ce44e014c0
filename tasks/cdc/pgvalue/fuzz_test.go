package pgvalue

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math"
	"math/big"
	"regexp"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
)

// The fuzz tests hold each parser to an oracle written by others: pgx's
// pgtype text decoders (its own parser of PostgreSQL's date and time
// output, its numeric, float and uuid readers), math/big, strconv and
// encoding/hex; and the numeric conversion to change.Rescale, decode's
// own. Invariant of each: what PostgreSQL's grammar of the type's output
// allows is read, as the oracle reads it, or refused as out of the
// column's range; what the oracle cannot read is refused.

var pgMap = pgtype.NewMap()

func pgScan(oid uint32, text string, dst any) error {
	return pgMap.Scan(oid, pgtype.TextFormatCode, []byte(text), dst)
}

// decoderFor is the decoder of a source type OID into a mapped type.
func decoderFor(t *testing.T, oid uint32, mod int32, typ mapping.Type) *Decoder {
	t.Helper()
	d, err := NewDecoder(Column{Name: "c", TypeOID: oid, TypeMod: mod}, &mapping.Col{Name: "c", Type: typ})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func seedCases(f *testing.F, pg ...string) {
	for _, c := range textCases {
		for _, p := range pg {
			if c.pg == p {
				f.Add(c.text)
			}
		}
	}
}

var numericGrammar = regexp.MustCompile(`^(-?[0-9]+(\.[0-9]+)?|NaN|-?Infinity)$`)

// FuzzNumeric: numeric text into Decimal(P, S) gives what change.Rescale
// (decode's conversion) gives for pgtype's reading of the same text, or
// is refused when Rescale refuses; into String, the same number.
func FuzzNumeric(f *testing.F) {
	seedCases(f, "numeric", "numeric(12,2)", "numeric(3,-2)", "numeric(2,5)", "numeric(76,0)", "numeric(1000,0)")
	for _, s := range []string{"0", "-0", "00012.3400", "-0.000", "1.", ".5", "1e5", "+1", " 1", "NaN ", "-NaN"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		for _, ps := range [][2]int{{1, 0}, {1, 1}, {2, 2}, {4, 3}, {5, 2}, {12, 2}, {18, 18}, {38, 10}, {76, 0}, {76, 38}, {76, 76}} {
			typ := mapping.Type{Kind: mapping.KindDecimal, Prec: ps[0], Scale: ps[1]}
			got, err := decoderFor(t, pgtype.NumericOID, -1, typ).Text([]byte(text))
			if !numericGrammar.MatchString(text) {
				if !errors.Is(err, ErrNotText) {
					t.Fatalf("%q (not numeric_out's) into %s: got %+v, %v", text, typ, got, err)
				}
				return
			}
			var n pgtype.Numeric
			if perr := pgScan(pgtype.NumericOID, text, &n); perr != nil {
				t.Fatalf("%q: pgtype: %v", text, perr)
			}
			if n.NaN || n.InfinityModifier != pgtype.Finite {
				if !errors.Is(err, ErrSpecialValue) {
					t.Fatalf("%q into %s: got %+v, %v; want ErrSpecialValue", text, typ, got, err)
				}
				continue
			}
			want, rerr := change.Rescale(n.Int, int64(n.Exp), typ)
			switch {
			case rerr != nil && err == nil:
				t.Fatalf("%q into %s: got %q, Rescale refuses: %v", text, typ, got.S, rerr)
			case rerr == nil && err != nil:
				t.Fatalf("%q into %s: %v; Rescale gives %s", text, typ, err, want)
			case rerr == nil && got.S != want.String():
				t.Fatalf("%q into %s: got %q, Rescale gives %q", text, typ, got.S, want.String())
			case err != nil && !errors.Is(err, ErrOutOfRange) && !errors.Is(err, ErrWouldRound):
				t.Fatalf("%q into %s: %v", text, typ, err)
			}
		}
		for _, mod := range []int32{-1, 38<<16 | 2 + varHeader} {
			got, err := decoderFor(t, pgtype.NumericOID, mod, mapping.Type{Kind: mapping.KindString}).Text([]byte(text))
			if err != nil {
				t.Fatalf("%q into String: %v", text, err)
			}
			if mod != -1 || text == "NaN" || text == "Infinity" || text == "-Infinity" {
				if got.S != text {
					t.Fatalf("%q into String (typmod %d): got %q", text, mod, got.S)
				}
				continue
			}
			a, _ := new(big.Rat).SetString(text)
			b, ok := new(big.Rat).SetString(got.S)
			if !ok || a.Cmp(b) != 0 || (len(got.S) > 1 && bytes.ContainsAny([]byte(got.S[len(got.S)-1:]), ".")) {
				t.Fatalf("%q into String: got %q, not the same number", text, got.S)
			}
		}
	})
}

var intGrammar = regexp.MustCompile(`^-?[0-9]+$`)

// FuzzInteger: an integer's (or integral numeric's) text into every
// integer type: the value big.Int reads, or refused when out of range.
func FuzzInteger(f *testing.F) {
	seedCases(f, "smallint", "integer", "bigint", "numeric")
	f.Add("-0")
	f.Add("007")
	f.Fuzz(func(t *testing.T, text string) {
		for _, typ := range []mapping.Type{{Kind: mapping.KindInt, Bits: 8}, {Kind: mapping.KindInt, Bits: 16}, {Kind: mapping.KindInt, Bits: 64},
			{Kind: mapping.KindUint, Bits: 8}, {Kind: mapping.KindUint, Bits: 32}, {Kind: mapping.KindUint, Bits: 64}} {
			got, err := decoderFor(t, pgtype.Int8OID, -1, typ).Text([]byte(text))
			if !intGrammar.MatchString(text) {
				if numericGrammar.MatchString(text) {
					continue // an integer type's text is never a fraction or a special, but numeric's is: see below
				}
				if !errors.Is(err, ErrNotText) {
					t.Fatalf("%q into %s: got %+v, %v", text, typ, got, err)
				}
				continue
			}
			n, _ := new(big.Int).SetString(text, 10)
			lo, hi := new(big.Int).Neg(new(big.Int).Lsh(big.NewInt(1), uint(typ.Bits-1))), new(big.Int).Lsh(big.NewInt(1), uint(typ.Bits-1))
			if typ.Kind == mapping.KindUint {
				lo, hi = big.NewInt(0), new(big.Int).Lsh(big.NewInt(1), uint(typ.Bits))
			}
			inRange := n.Cmp(lo) >= 0 && n.Cmp(hi) < 0
			switch {
			case !inRange && !errors.Is(err, ErrOutOfRange):
				t.Fatalf("%q into %s: got %+v, %v; want ErrOutOfRange", text, typ, got, err)
			case inRange && err != nil:
				t.Fatalf("%q into %s: %v", text, typ, err)
			case inRange && typ.Kind == mapping.KindInt && int64(got.N) != n.Int64():
				t.Fatalf("%q into %s: got %d", text, typ, int64(got.N))
			case inRange && typ.Kind == mapping.KindUint && got.N != n.Uint64():
				t.Fatalf("%q into %s: got %d", text, typ, got.N)
			}
		}
		if !numericGrammar.MatchString(text) || intGrammar.MatchString(text) {
			return
		}
		typ := mapping.Type{Kind: mapping.KindInt, Bits: 64}
		got, err := decoderFor(t, pgtype.NumericOID, -1, typ).Text([]byte(text))
		r, ok := new(big.Rat).SetString(text)
		switch {
		case !ok:
			if !errors.Is(err, ErrSpecialValue) {
				t.Fatalf("numeric %q into Int64: got %+v, %v", text, got, err)
			}
		case !r.IsInt():
			if !errors.Is(err, ErrWouldRound) {
				t.Fatalf("numeric %q into Int64: got %+v, %v; want ErrWouldRound", text, got, err)
			}
		case r.Num().IsInt64():
			if err != nil || int64(got.N) != r.Num().Int64() {
				t.Fatalf("numeric %q into Int64: got %+v, %v", text, got, err)
			}
		default:
			if !errors.Is(err, ErrOutOfRange) {
				t.Fatalf("numeric %q into Int64: got %+v, %v; want ErrOutOfRange", text, got, err)
			}
		}
	})
}

var floatGrammar = regexp.MustCompile(`^(NaN|-?Infinity|-?[0-9]+(\.[0-9]+)?(e[+-][0-9]+)?)$`)

// FuzzFloat: real and double precision text reads as pgtype reads it (bit
// for bit, NaN as change's one NaN), into Float32 only when exact.
func FuzzFloat(f *testing.F) {
	seedCases(f, "real", "double precision")
	f.Add("1e-46")
	f.Add("3.4028236e+38")
	f.Fuzz(func(t *testing.T, text string) {
		for _, src := range []uint32{pgtype.Float4OID, pgtype.Float8OID} {
			for _, typ := range []mapping.Type{{Kind: mapping.KindFloat32}, {Kind: mapping.KindFloat64}} {
				got, err := decoderFor(t, src, -1, typ).Text([]byte(text))
				if err != nil && !floatGrammar.MatchString(text) {
					continue
				}
				var want float64
				if src == pgtype.Float4OID {
					var f32 float32
					if perr := pgScan(src, text, &f32); perr != nil {
						if err == nil {
							t.Fatalf("real %q: got %+v; pgtype: %v", text, got, perr)
						}
						continue
					}
					want = float64(f32)
				} else if perr := pgScan(src, text, &want); perr != nil {
					if err == nil {
						t.Fatalf("double %q: got %+v; pgtype: %v", text, got, perr)
					}
					continue
				}
				exact := math.IsNaN(want) || float64(float32(want)) == want
				switch {
				case typ.Kind == mapping.KindFloat32 && !exact:
					if !errors.Is(err, ErrWouldRound) {
						t.Fatalf("%q (OID %d) into Float32: got %+v, %v; want ErrWouldRound", text, src, got, err)
					}
				case err != nil:
					t.Fatalf("%q (OID %d): %v; pgtype reads %v", text, src, err, want)
				case !got.Equal(change.FloatValue(want)):
					t.Fatalf("%q (OID %d): got %v, pgtype %v", text, src, math.Float64frombits(got.N), want)
				}
			}
		}
	})
}

var stampGrammar = regexp.MustCompile(`^([0-9]{4,7}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?([+-][0-9]{2}(:[0-9]{2}(:[0-9]{2})?)?)?( BC)?|-?infinity)$`)

// FuzzTimestamp: timestamp and timestamptz text read as pgtype's parser of
// PostgreSQL's output reads it, to the microsecond (within pgtype's
// range); the String form reads back, by pgtype, as the same instant.
func FuzzTimestamp(f *testing.F) {
	seedCases(f, "timestamp", "timestamptz", "timestamp(0)")
	for _, s := range []string{"1890-03-04 06:53:32-03:06:28", "0001-12-31 23:00:00-01 BC", "2024-02-29 20:49:56.123456+13:45", "4714-11-24 00:00:00 BC"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		for _, zoned := range []bool{false, true} {
			st, ok := parseTimestamp([]byte(text), zoned)
			var pgTime pgtype.Timestamptz
			var perr error
			if zoned {
				perr = pgScan(pgtype.TimestamptzOID, text, &pgTime)
			} else {
				var ts pgtype.Timestamp
				perr = pgScan(pgtype.TimestampOID, text, &ts)
				pgTime = pgtype.Timestamptz(ts)
			}
			if !ok {
				if perr == nil && stampGrammar.MatchString(text) {
					t.Fatalf("%q (zoned %v): refused; pgtype reads %v", text, zoned, pgTime)
				}
				continue
			}
			if !stampGrammar.MatchString(text) {
				t.Fatalf("%q (zoned %v): read, yet not PostgreSQL's output", text, zoned)
			}
			if perr != nil {
				if st.year > -4713 && st.year < 294276 { // pgtype refuses beyond PostgreSQL's range; so would PostgreSQL print it
					t.Fatalf("%q (zoned %v): read as %+v; pgtype: %v", text, zoned, st, perr)
				}
				continue
			}
			if int(st.special) != map[pgtype.InfinityModifier]int{pgtype.Finite: int(finite), pgtype.Infinity: int(posInf), pgtype.NegativeInfinity: int(negInf)}[pgTime.InfinityModifier] {
				t.Fatalf("%q: special %d, pgtype %v", text, st.special, pgTime.InfinityModifier)
			}
			if st.special != finite {
				continue
			}
			if got, want := st.unix()*1_000_000+st.micros, pgTime.Time.UnixMicro(); got != want {
				t.Fatalf("%q (zoned %v): %d µs, pgtype %d µs (%v)", text, zoned, got, want, pgTime.Time)
			}
			out := appendStamp(nil, st.unix(), st.micros)
			var back pgtype.Timestamp
			if err := pgScan(pgtype.TimestampOID, string(out), &back); err != nil || back.Time.UnixMicro() != pgTime.Time.UnixMicro() {
				t.Fatalf("%q: the String form %q reads back as %v, %v", text, out, back.Time, err)
			}
		}
	})
}

var dateGrammar = regexp.MustCompile(`^([0-9]{4,7}-[0-9]{2}-[0-9]{2}( BC)?|-?infinity)$`)

// FuzzDate: date text read as pgtype reads it.
func FuzzDate(f *testing.F) {
	seedCases(f, "date")
	f.Add("2024-02-30")
	f.Add("0001-01-01 BC")
	f.Fuzz(func(t *testing.T, text string) {
		st, ok := parseDate([]byte(text))
		var d pgtype.Date
		perr := pgScan(pgtype.DateOID, text, &d)
		switch {
		case !ok:
			if perr == nil && dateGrammar.MatchString(text) {
				t.Fatalf("%q: refused; pgtype reads %v", text, d)
			}
		case !dateGrammar.MatchString(text):
			t.Fatalf("%q: read, yet not PostgreSQL's output", text)
		case perr != nil:
			if st.year > -4713 && st.year < 5874897 {
				t.Fatalf("%q: read as %+v; pgtype: %v", text, st, perr)
			}
		case st.special == finite && daysFromCivil(st.year, st.month, st.day) != floorDiv(d.Time.Unix(), 86400):
			t.Fatalf("%q: day %d, pgtype %v", text, daysFromCivil(st.year, st.month, st.day), d.Time)
		}
	})
}

// FuzzUUIDAndBytea: uuid text read as pgtype reads it; bytea's hex form
// as encoding/hex reads it.
func FuzzUUIDAndBytea(f *testing.F) {
	seedCases(f, "uuid", "bytea")
	f.Add(`\x0G`)
	f.Fuzz(func(t *testing.T, text string) {
		got, err := decoderFor(t, pgtype.UUIDOID, -1, mapping.Type{Kind: mapping.KindUUID}).Text([]byte(text))
		var u pgtype.UUID
		if perr := pgScan(pgtype.UUIDOID, text, &u); err == nil && (perr != nil || got.S != string(u.Bytes[:])) {
			t.Fatalf("uuid %q: got %x; pgtype %x, %v", text, got.S, u.Bytes, perr)
		}
		got, err = decoderFor(t, pgtype.ByteaOID, -1, mapping.Type{Kind: mapping.KindString}).Text([]byte(text))
		if len(text) >= 2 && text[:2] == `\x` {
			want, herr := hex.DecodeString(text[2:])
			if (herr == nil) != (err == nil) || (err == nil && got.S != string(want)) {
				t.Fatalf("bytea %q: got %q, %v; encoding/hex %q, %v", text, got.S, err, want, herr)
			}
		} else if !errors.Is(err, ErrNotText) {
			t.Fatalf("bytea %q: got %q, %v; want ErrNotText", text, got.S, err)
		}
	})
}
