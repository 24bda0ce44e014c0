package pgvalue

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
)

// op is what a Decoder does with a value's text.
type op uint8

const (
	opInt           op = iota + 1 // an integer or integral numeric → Int, UInt
	opDecimal                     // an integer or numeric → Decimal(P, S)
	opFloat                       // real, double precision → Float32, Float64
	opBool                        // boolean → Bool
	opText                        // any type → String: its text as printed
	opNumericText                 // numeric → String: the exact decimal text
	opBytea                       // bytea → String: the bytes
	opUUID                        // uuid → UUID
	opUUIDText                    // uuid → String: lower-case text
	opDate                        // date → Date
	opDateText                    // date → String: YYYY-MM-DD
	opTimestamp                   // timestamp, timestamptz → DateTime, DateTime64
	opTimestampText               // timestamp, timestamptz → String: YYYY-MM-DD hh:mm:ss.ffffff in UTC
)

// Decoder converts one source column's values, as pgoutput sends them,
// into the canonical change.Value of its mapped ClickHouse column: the
// value decode makes of the same source value in a trigger batch, so that
// a key encodes to the same bytes whichever way it came. A value the
// column cannot hold exactly is refused (change.ErrBadValue and a
// narrower cause), never rounded. A Decoder holds no state between values;
// it may be used from several goroutines.
type Decoder struct {
	t        mapping.Type
	maxLen   int
	op       op
	bits32   bool // real: parse at float32 precision
	zoned    bool // timestamptz: the text carries an offset
	stripped bool // unconstrained numeric → String: no trailing fraction zeros (Debezium's scale)
	padded   bool // char(n): its values are padded with spaces (messages say so)
	srcType  string
}

// NewDecoder returns the decoder of values of the source column src into
// the mapped column col. It refuses (*ColumnError wrapping ErrWrongType) a
// mapping whose source_type names another type than src's, and a
// ClickHouse type that cannot hold src's values: see docs/mapping.md,
// "The replication slot (cdc sync)". A String column holds, by src's type:
// numeric its exact decimal text, uuid its lower-case text, date
// YYYY-MM-DD, timestamp and timestamptz YYYY-MM-DD hh:mm:ss.ffffff in UTC,
// bytea its bytes, and every other type its text as PostgreSQL prints it.
func NewDecoder(src Column, col *mapping.Col) (*Decoder, error) {
	fam := familyOf(src.TypeOID)
	d := &Decoder{t: col.Type, maxLen: col.MaxLen, srcType: src.typeName(),
		zoned: fam == famTimestamptz, bits32: fam == famFloat4}
	wrong := func(format string, args ...any) error {
		return &ColumnError{Column: src.Name, Type: d.srcType, Err: fmt.Errorf("%w: "+format, append([]any{ErrWrongType}, args...)...)}
	}
	if st := col.Source.String(); st != "" && st != fam.sourceName(src.TypeOID) {
		return nil, wrong("the mapping's source_type is %s", st)
	}
	switch k := col.Type.Kind; {
	case (k == mapping.KindInt || k == mapping.KindUint) && (fam == famInt || fam == famNumeric):
		d.op = opInt
	case k == mapping.KindDecimal && (fam == famInt || fam == famNumeric):
		d.op = opDecimal
	case (k == mapping.KindFloat32 || k == mapping.KindFloat64) && (fam == famFloat4 || fam == famFloat8):
		d.op = opFloat
	case k == mapping.KindBool && fam == famBool:
		d.op = opBool
	case k == mapping.KindUUID && fam == famUUID:
		d.op = opUUID
	case k == mapping.KindDate && fam == famDate:
		d.op = opDate
	case (k == mapping.KindDateTime || k == mapping.KindDateTime64) && (fam == famTimestamp || fam == famTimestamptz):
		d.op = opTimestamp
	case k == mapping.KindString:
		d.op = textOp(fam)
		_, _, scaled := numericMod(src.TypeMod)
		d.stripped = fam == famNumeric && !scaled
		d.padded = src.TypeOID == pgtype.BPCharOID
	default:
		return nil, wrong("%s cannot hold it; map it to %s", col.Type, fam.mapsTo())
	}
	return d, nil
}

func textOp(f family) op {
	switch f {
	case famNumeric:
		return opNumericText
	case famBytea:
		return opBytea
	case famUUID:
		return opUUIDText
	case famDate:
		return opDateText
	case famTimestamp, famTimestamptz:
		return opTimestampText
	}
	return opText
}

// mapsTo names the ClickHouse types a family's values may be mapped to,
// for messages.
func (f family) mapsTo() string {
	switch f {
	case famInt:
		return "Int8..Int64, UInt8..UInt64, Decimal(P, S) or String"
	case famNumeric:
		return "Decimal(P, S), String (its exact text), or an integer type for integral values"
	case famFloat4, famFloat8:
		return "Float64, Float32 (exact for real) or String"
	case famBool:
		return "Bool or String"
	case famUUID:
		return "UUID or String"
	case famDate:
		return "Date (1970-01-01..2149-06-06) or String (any date)"
	case famTimestamp, famTimestamptz:
		return "DateTime64(6, 'UTC'), DateTime (whole seconds) or String"
	}
	return "String"
}

// Value converts one column of a pgoutput tuple: kind is its byte ('n'
// NULL, 'u' an unchanged TOASTed value, 't' text, 'b' binary) and data
// its bytes, which the returned value does not keep. 'u' gives
// change.Value{Toast: true}: the value the row held before.
func (d *Decoder) Value(kind byte, data []byte) (change.Value, error) {
	switch kind {
	case 't':
		return d.Text(data)
	case 'n':
		if !d.t.Nullable {
			return change.Value{}, fmt.Errorf("%w (%s)", change.ErrNotNullable, d.t)
		}
		return change.Value{Null: true}, nil
	case 'u':
		return change.Value{Toast: true}, nil
	case 'b':
		return change.Value{}, fmt.Errorf("%w: pgoutput sent a binary value (binary 'true'); changesink reads text", ErrSettings)
	}
	return change.Value{}, refuse(ErrNotText, "a tuple column of kind %q (pgoutput sends n, u, t or b)", kind)
}

// Text converts a value in PostgreSQL's text output of the column's type
// (DateStyle ISO; see Settings).
func (d *Decoder) Text(b []byte) (change.Value, error) {
	switch d.op {
	case opInt:
		return d.integer(b)
	case opDecimal:
		return d.decimal(b)
	case opFloat:
		return d.float(b)
	case opBool:
		switch string(b) {
		case "t":
			return change.Value{N: 1}, nil
		case "f":
			return change.Value{N: 0}, nil
		}
		return change.Value{}, d.notText(b)
	case opText:
		if !utf8.Valid(b) {
			return change.Value{}, refuse(ErrNotText, "%s that is not UTF-8 (client_encoding must be UTF8)", d.srcType)
		}
		return d.str(b)
	case opNumericText:
		return d.numericText(b)
	case opBytea:
		return d.bytea(b)
	case opUUID, opUUIDText:
		var u [16]byte
		if !parseUUID(b, &u) {
			return change.Value{}, d.notText(b)
		}
		if d.op == opUUID {
			return change.Value{S: string(u[:])}, nil
		}
		var buf [36]byte
		return d.str(appendUUID(buf[:0], &u))
	case opDate, opDateText:
		return d.date(b)
	case opTimestamp, opTimestampText:
		return d.timestamp(b)
	}
	return change.Value{}, fmt.Errorf("%w: a decoder without an operation", ErrWrongType)
}

// as names the type t for a message's "map it to": Nullable(t) when the
// column is Nullable, so that following the message keeps its NULLs.
func (d *Decoder) as(t string) string { return nullableIf(d.t.Nullable, t) }

func (d *Decoder) notText(b []byte) error {
	return refuse(ErrNotText, "%q for a %s", short(b), d.srcType)
}

// short bounds a value quoted in a message.
func short(b []byte) string {
	const shown = 40
	if len(b) <= shown+20 {
		return string(b)
	}
	return fmt.Sprintf("%s… (%d bytes)", b[:shown], len(b))
}

// str returns a String value, within max_length (code points, as decode
// and the seed count).
func (d *Decoder) str(b []byte) (change.Value, error) {
	if d.maxLen > 0 && len(b) > d.maxLen {
		if n := utf8.RuneCount(b); n > d.maxLen {
			if d.padded {
				return change.Value{}, refuse(ErrTooLong, "%d characters (char(n) pads with spaces) exceed max_length %d", n, d.maxLen)
			}
			return change.Value{}, refuse(ErrTooLong, "%d characters exceed max_length %d", n, d.maxLen)
		}
	}
	return change.Value{S: string(b)}, nil
}

func (d *Decoder) integer(b []byte) (change.Value, error) {
	n, ok := parseNumber(b)
	switch {
	case !ok:
		return change.Value{}, d.notText(b)
	case n.special != finite:
		return change.Value{}, refuse(ErrSpecialValue, "numeric %s does not fit %s; map it to %s with source_type: numeric", b, d.t, d.as("String"))
	case !fracZero(n.frac):
		return change.Value{}, refuse(ErrWouldRound, "%s has decimal places, which %s would drop; map it to %s", short(b), d.t, d.as("Decimal(P, S)"))
	}
	mag, ok := uint64Of(n.whole)
	if !ok {
		return change.Value{}, refuse(ErrOutOfRange, "%s is out of range for %s", short(b), d.t)
	}
	if d.t.Kind == mapping.KindUint {
		if n.neg && mag != 0 {
			return change.Value{}, refuse(ErrOutOfRange, "%s is negative for an unsigned column (%s)", b, d.t)
		}
		if d.t.Bits < 64 && mag >= 1<<d.t.Bits {
			return change.Value{}, refuse(ErrOutOfRange, "%s is out of range for %s", b, d.t)
		}
		return change.Value{N: mag}, nil
	}
	limit := uint64(1) << (d.t.Bits - 1) // the magnitude of the minimum
	if mag > limit || (!n.neg && mag == limit) {
		return change.Value{}, refuse(ErrOutOfRange, "%s is out of range for %s", b, d.t)
	}
	v := int64(mag) // -2^63 wraps to itself
	if n.neg {
		v = -v
	}
	return change.Value{N: uint64(v)}, nil
}

// decimal reads a number into Decimal(P, S): the unscaled integer's text,
// as change.Rescale makes it (no leading zeros, "0" for zero, a sign only
// below zero), refusing digits beyond the scale or the precision.
func (d *Decoder) decimal(b []byte) (change.Value, error) {
	n, ok := parseNumber(b)
	switch {
	case !ok:
		return change.Value{}, d.notText(b)
	case n.special != finite:
		return change.Value{}, refuse(ErrSpecialValue, "numeric %s does not fit %s; map it to %s with source_type: numeric", b, d.t, d.as("String"))
	}
	frac := n.frac
	if len(frac) > d.t.Scale {
		if !fracZero(frac[d.t.Scale:]) {
			return change.Value{}, refuse(ErrWouldRound, "%s has more than %d decimal places", short(b), d.t.Scale)
		}
		frac = frac[:d.t.Scale]
	}
	pad := d.t.Scale - len(frac) // zeros after the fraction
	lead := frac                 // the fraction's digits that follow the whole part's
	if len(n.whole) == 0 {
		lead = trimZeros(frac)
	}
	digits := len(n.whole) + len(lead)
	if digits == 0 {
		return change.Value{S: "0"}, nil
	}
	if digits+pad > d.t.Prec {
		return change.Value{}, refuse(ErrOutOfRange, "%s does not fit %s", short(b), d.t)
	}
	var buf [80]byte // Prec ≤ 76
	out := buf[:0]
	if n.neg {
		out = append(out, '-')
	}
	out = append(out, n.whole...)
	out = append(out, lead...)
	for range pad {
		out = append(out, '0')
	}
	return change.Value{S: string(out)}, nil
}

// float reads real and double precision (float4out, float8out: the
// shortest text that reads back exactly, with extra_float_digits ≥ 1).
func (d *Decoder) float(b []byte) (change.Value, error) {
	if !floatText(b) {
		return change.Value{}, d.notText(b)
	}
	bits := 64
	if d.bits32 {
		bits = 32
	}
	f, err := strconv.ParseFloat(string(b), bits)
	if err != nil {
		return change.Value{}, d.notText(b)
	}
	if d.t.Kind == mapping.KindFloat32 && !math.IsNaN(f) && float64(float32(f)) != f {
		return change.Value{}, refuse(ErrWouldRound, "%s is not exactly a Float32; map the column to %s", b, d.as("Float64"))
	}
	return change.FloatValue(f), nil
}

// numericText holds a numeric as its exact decimal text: as printed for a
// numeric(p, s) (s fraction digits: 12.50), without trailing fraction
// zeros for an unconstrained numeric (0.5, 100), which is the text decode
// makes of Debezium's {scale, value} for the same value. NaN, Infinity and
// -Infinity stay as printed.
func (d *Decoder) numericText(b []byte) (change.Value, error) {
	n, ok := parseNumber(b)
	if !ok {
		return change.Value{}, d.notText(b)
	}
	if n.special == finite && d.stripped && n.frac != nil {
		f := n.frac
		for len(f) > 0 && f[len(f)-1] == '0' {
			f = f[:len(f)-1]
		}
		keep := len(b) - len(n.frac) + len(f)
		if len(f) == 0 {
			keep-- // the point
		}
		b = b[:keep]
	}
	return d.str(b)
}

// bytea reads bytea_out's hex form (\x and two hex digits a byte) into the
// bytes, refusing the escape form (bytea_output = escape), which never
// starts with \x: it prints a backslash as \\.
func (d *Decoder) bytea(b []byte) (change.Value, error) {
	if len(b) < 2 || b[0] != '\\' || b[1] != 'x' {
		return change.Value{}, refuse(ErrNotText, "bytea in the escape form (bytea_output = escape); changesink reads the hex form")
	}
	hex := b[2:]
	if len(hex)%2 != 0 {
		return change.Value{}, d.notText(b)
	}
	n := len(hex) / 2
	if d.maxLen > 0 && n > d.maxLen {
		return change.Value{}, refuse(ErrTooLong, "%d bytes exceed max_length %d", n, d.maxLen)
	}
	var sb strings.Builder
	sb.Grow(n)
	for i := 0; i < len(hex); i += 2 {
		hi, ok1 := unhex(hex[i])
		lo, ok2 := unhex(hex[i+1])
		if !ok1 || !ok2 {
			return change.Value{}, d.notText(b)
		}
		sb.WriteByte(hi<<4 | lo)
	}
	return change.Value{S: sb.String()}, nil
}

// date reads a date into Date (days since 1970-01-01, up to 2149-06-06)
// or String (YYYY-MM-DD: the text as printed, which for years beyond 9999
// has more digits, before year 1 ends in " BC", and is infinity or
// -infinity for those).
func (d *Decoder) date(b []byte) (change.Value, error) {
	st, ok := parseDate(b)
	if !ok {
		return change.Value{}, d.notText(b)
	}
	if d.op == opDateText {
		return d.str(b)
	}
	if st.special != finite {
		return change.Value{}, refuse(ErrSpecialValue, "date %s does not fit Date; map it to %s with source_type: date", b, d.as("String"))
	}
	days := daysFromCivil(st.year, st.month, st.day)
	if days < 0 || days > mapping.MaxDateDays {
		return change.Value{}, refuse(ErrOutOfRange, "date %s is outside the Date range 1970-01-01..2149-06-06; map it to %s with source_type: date", b, d.as("String"))
	}
	return change.Value{N: uint64(days)}, nil
}

// timestamp reads a timestamp (its wall-clock time taken as UTC, as decode
// reads Debezium's) or a timestamptz (its instant) into DateTime (whole
// seconds), DateTime64 (ticks of its precision) or String.
func (d *Decoder) timestamp(b []byte) (change.Value, error) {
	st, ok := parseTimestamp(b, d.zoned)
	if !ok {
		return change.Value{}, d.notText(b)
	}
	src := "timestamp"
	if d.zoned {
		src = "timestamptz"
	}
	if d.op == opTimestampText {
		if st.special != finite {
			return d.str(b)
		}
		var buf [48]byte
		return d.str(appendStamp(buf[:0], st.unix(), st.micros))
	}
	if st.special != finite {
		return change.Value{}, refuse(ErrSpecialValue, "%s %s does not fit %s; map it to %s with source_type: %s", src, b, d.t, d.as("String"), src)
	}
	sec := st.unix()
	if d.t.Kind == mapping.KindDateTime {
		if st.micros != 0 {
			return change.Value{}, refuse(ErrWouldRound, "%s %s has a fraction of a second, which %s would round; map it to %s", src, b, d.t, d.as("DateTime64(6, 'UTC')"))
		}
		if sec < 0 || sec > math.MaxUint32 {
			return change.Value{}, refuse(ErrOutOfRange, "%s %s is outside the DateTime range 1970-01-01..2106-02-07; map it to %s", src, b, d.as("DateTime64(6, 'UTC')"))
		}
		return change.Value{N: uint64(sec)}, nil
	}
	if sec < mapping.MinDateTime64 || sec > mapping.MaxDateTime64 {
		return change.Value{}, refuse(ErrOutOfRange, "%s %s is outside the DateTime64 range 1900-01-01..2299-12-31; map it to %s with source_type: %s", src, b, d.as("String"), src)
	}
	per := d.t.TicksPerSecond()
	if sec > math.MaxInt64/per-1 { // DateTime64(9) ends in 2262
		return change.Value{}, refuse(ErrOutOfRange, "%s %s is beyond %s's range (its ticks overflow); map it to %s", src, b, d.t, d.as("DateTime64(6, 'UTC')"))
	}
	var ticks int64
	switch p := d.t.Prec; {
	case p >= 6:
		ticks = st.micros * pow10[p-6]
	case st.micros%pow10[6-p] != 0:
		return change.Value{}, refuse(ErrWouldRound, "%s %s has more sub-second digits than %s", src, b, d.t)
	default:
		ticks = st.micros / pow10[6-p]
	}
	return change.Value{N: uint64(sec*per + ticks)}, nil
}

var pow10 = [...]int64{1, 10, 100, 1000, 10000, 100000, 1000000}
