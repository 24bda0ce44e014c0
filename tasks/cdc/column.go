package cdc

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/amazon-ion/ion-go/ion"
	"github.com/google/uuid"
)

// toastPlaceholder is Debezium's default unavailable.value.placeholder: the
// value of an unchanged TOASTed column under REPLICA IDENTITY DEFAULT.
const toastPlaceholder = "__debezium_unavailable_value"

// badValue builds an ErrBadValue cause.
func badValue(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadValue, fmt.Sprintf(format, args...))
}

func wrongType(t colType, got ion.Type) error {
	if got == ion.StructType {
		return badValue("expected %s for %s, got an Ion struct (Debezium writes an unconstrained numeric as {scale, value}: "+
			"map the column as Decimal(P, S), or set decimal.handling.mode: string on the trigger)", expectedIon(t), t)
	}
	return badValue("expected %s for %s, got an Ion %s", expectedIon(t), t, got)
}

func expectedIon(t colType) string {
	switch t.kind {
	case kindInt, kindUint:
		return "an Ion int (or a decimal without fraction digits, 5.)"
	case kindFloat32, kindFloat64:
		return "an Ion float"
	case kindDecimal:
		return "an Ion decimal or int (or a decimal string, or Debezium's {scale, value} struct)"
	case kindString:
		return "an Ion string, symbol or blob"
	case kindBool:
		return "an Ion bool"
	case kindDate:
		return "an Ion day timestamp (2024-01-15) or a LocalDate string"
	case kindDateTime, kindDateTime64:
		return "an Ion timestamp or a ZonedDateTime/OffsetDateTime/LocalDateTime string"
	case kindUUID:
		return "an Ion string holding a UUID"
	}
	return "a value"
}

// convert reads the value the reader is on as column c's canonical value.
// It implements the seed's value checks, generalised: integers in range and
// never booleans (Ion keeps the types apart), strings within max_length
// counted in code points like Python's len(), the TOAST placeholder refused
// in any column, null only in Nullable columns; and refuses every lossy
// conversion (more decimal digits than the scale, more sub-second digits
// than the precision, a double that is not a float32) instead of rounding.
func convert(r ion.Reader, c *colSpec) (value, error) {
	t := c.typ
	typ := r.Type()
	if r.IsNull() {
		if t.nullable {
			return value{null: true}, nil
		}
		return value{}, badValue("null in a column that is not Nullable (%s)", t)
	}
	// The TOAST placeholder is refused whatever the column's type.
	var str string
	var haveStr bool
	switch typ {
	case ion.StringType:
		s, err := r.StringValue()
		if err != nil || s == nil {
			return value{}, malformedValue(err)
		}
		str, haveStr = *s, true
		if !utf8.ValidString(str) {
			return value{}, errNotUTF8
		}
		if str == toastPlaceholder {
			return value{}, ErrToast
		}
	case ion.BlobType, ion.ClobType:
		if t.kind != kindString {
			break
		}
		b, err := r.ByteValue()
		if err != nil {
			return value{}, malformedValue(err)
		}
		if string(b) == toastPlaceholder {
			return value{}, ErrToast
		}
		if c.maxLen > 0 && len(b) > c.maxLen {
			return value{}, badValue("%d bytes exceed max_length %d", len(b), c.maxLen)
		}
		return value{s: string(b)}, nil
	}

	switch t.kind {
	case kindInt:
		if typ == ion.DecimalType {
			b, err := integralDecimal(r, t)
			if err != nil {
				return value{}, err
			}
			if !b.IsInt64() {
				return value{}, badValue("%s is out of range for Int%d", shortNumber(b.String()), t.bits)
			}
			return checkInt(b.Int64(), t)
		}
		if typ != ion.IntType {
			return value{}, wrongType(t, typ)
		}
		n, err := readInt64(r, t)
		if err != nil {
			return value{}, err
		}
		return checkInt(n, t)

	case kindUint:
		var n uint64
		switch typ {
		case ion.DecimalType:
			b, err := integralDecimal(r, t)
			if err != nil {
				return value{}, err
			}
			if b.Sign() < 0 || b.Cmp(maxUint64) > 0 {
				return value{}, badValue("%s is out of range for UInt%d", shortNumber(b.String()), t.bits)
			}
			n = b.Uint64()
		case ion.IntType:
			var err error
			if n, err = readUint64(r); err != nil {
				return value{}, err
			}
		default:
			return value{}, wrongType(t, typ)
		}
		if t.bits < 64 && n >= uint64(1)<<t.bits {
			return value{}, badValue("%d is out of range for UInt%d", n, t.bits)
		}
		return value{n: n}, nil

	case kindFloat32, kindFloat64:
		if typ != ion.FloatType {
			return value{}, wrongType(t, typ)
		}
		f, err := r.FloatValue()
		if err != nil || f == nil {
			return value{}, malformedValue(err)
		}
		if t.kind == kindFloat32 && !math.IsNaN(*f) && float64(float32(*f)) != *f {
			return value{}, badValue("%v is not exactly a Float32 (a PostgreSQL real arrives widened exactly; map a double precision column to Float64)", *f)
		}
		return floatValue(*f), nil

	case kindDecimal:
		return convertDecimal(r, t, typ, str, haveStr)

	case kindString:
		switch typ {
		case ion.StringType:
		case ion.SymbolType:
			sym, err := r.SymbolValue()
			if err != nil || sym == nil || sym.Text == nil {
				return value{}, badValue("a symbol without text")
			}
			str = *sym.Text
			if str == toastPlaceholder {
				return value{}, ErrToast
			}
		default:
			return value{}, wrongType(t, typ)
		}
		if c.maxLen > 0 && len(str) > c.maxLen {
			if n := utf8.RuneCountInString(str); n > c.maxLen {
				return value{}, badValue("%d characters exceed max_length %d", n, c.maxLen)
			}
		}
		return value{s: str}, nil

	case kindBool:
		if typ != ion.BoolType {
			return value{}, wrongType(t, typ)
		}
		b, err := r.BoolValue()
		if err != nil || b == nil {
			return value{}, malformedValue(err)
		}
		if *b {
			return value{n: 1}, nil
		}
		return value{n: 0}, nil

	case kindDate:
		var day time.Time
		switch typ {
		case ion.TimestampType:
			ts, err := r.TimestampValue()
			if err != nil || ts == nil {
				return value{}, malformedValue(err)
			}
			if ts.GetPrecision() != ion.TimestampPrecisionDay {
				return value{}, badValue("a timestamp with precision %v for a Date column; a date arrives as a day timestamp such as 2024-01-15", ts.GetPrecision())
			}
			day = ts.GetDateTime()
		case ion.StringType:
			d, err := time.Parse("2006-01-02", str)
			if err != nil {
				return value{}, badValue("the string is not a date YYYY-MM-DD")
			}
			day = d
		default:
			return value{}, wrongType(t, typ)
		}
		days := time.Date(day.Year(), day.Month(), day.Day(), 0, 0, 0, 0, time.UTC).Unix() / 86400
		if days < 0 || days > maxDateDays {
			return value{}, badValue("%s is outside the Date range 1970-01-01..2149-06-06", day.Format("2006-01-02"))
		}
		return value{n: uint64(days)}, nil

	case kindDateTime, kindDateTime64:
		var tm time.Time
		switch typ {
		case ion.TimestampType:
			ts, err := r.TimestampValue()
			if err != nil || ts == nil {
				return value{}, malformedValue(err)
			}
			if ts.GetPrecision() < ion.TimestampPrecisionMinute {
				return value{}, badValue("a date without a time (%v precision) for %s", ts.GetPrecision(), t)
			}
			tm = ts.GetDateTime()
		case ion.StringType:
			parsed, err := parseDateTimeString(str, t.loc)
			if err != nil {
				return value{}, err
			}
			tm = parsed
		default:
			return value{}, wrongType(t, typ)
		}
		return timeValue(tm, t)

	case kindUUID:
		if typ != ion.StringType {
			return value{}, wrongType(t, typ)
		}
		u, err := uuid.Parse(str)
		if err != nil {
			return value{}, badValue("the string is not a UUID")
		}
		return value{s: string(u[:])}, nil
	}
	return value{}, badValue("unsupported column kind")
}

func checkInt(n int64, t colType) (value, error) {
	lim := int64(1) << (t.bits - 1)
	if t.bits < 64 && (n < -lim || n >= lim) {
		return value{}, badValue("%d is out of range for Int%d", n, t.bits)
	}
	return value{n: uint64(n)}, nil
}

// integralDecimal reads an Ion decimal written without fraction digits
// (5.) as an integer. The seed accepts exactly these: IonToJson writes them
// as JSON integers, while 5.0 becomes the float 5.0, which it refuses.
func integralDecimal(r ion.Reader, t colType) (*big.Int, error) {
	d, err := r.DecimalValue()
	if err != nil || d == nil {
		return nil, malformedValue(err)
	}
	coef, exp := d.CoEx()
	if exp != 0 {
		return nil, badValue("expected an Ion int for %s, got the decimal %s", t, shortNumber(d.String()))
	}
	return coef, nil
}

// errNotUTF8 refuses a text Ion string whose bytes are not UTF-8 (ion-go's
// binary reader refuses them itself; its text reader passes them through):
// the file is corrupt. The reader is intact, so unlike other malformed
// input the record's key and LSN are still read and named.
var errNotUTF8 = fmt.Errorf("%w: a string that is not valid UTF-8 (the batch file is corrupt)", ErrMalformed)

// shortNumber bounds the text of a number quoted in a refusal: a value of
// thousands of digits is named by its first digits and its length, so a
// refusal stays one readable line.
func shortNumber(s string) string {
	const shown = 40
	if len(s) <= shown+20 {
		return s
	}
	return fmt.Sprintf("%s… (%d characters)", s[:shown], len(s))
}

func malformedValue(err error) error {
	if err == nil {
		err = errors.New("no value")
	}
	return fmt.Errorf("%w: %w", ErrMalformed, err)
}

// readIonInt reads the current Ion int: small when it fits an int64
// (ok), else b. Binary Ion stores a magnitude and a sign, so ion-go calls
// -2^63 a big integer; it is returned as small all the same.
func readIonInt(r ion.Reader) (small int64, b *big.Int, ok bool, err error) {
	size, err := r.IntSize()
	if err != nil {
		return 0, nil, false, malformedValue(err)
	}
	if size == ion.BigInt {
		b, err := r.BigIntValue()
		if err != nil || b == nil {
			return 0, nil, false, malformedValue(err)
		}
		if b.IsInt64() {
			return b.Int64(), nil, true, nil
		}
		return 0, b, false, nil
	}
	n, err := r.Int64Value()
	if err != nil || n == nil {
		return 0, nil, false, malformedValue(err)
	}
	return *n, nil, true, nil
}

func readInt64(r ion.Reader, t colType) (int64, error) {
	n, b, ok, err := readIonInt(r)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, badValue("%s is out of range for Int%d", shortNumber(b.String()), t.bits)
	}
	return n, nil
}

var maxUint64 = new(big.Int).SetUint64(math.MaxUint64)

// uint64Of returns the unsigned value of an int read by readIonInt, or
// false when it is outside 0..2^64-1.
func uint64Of(n int64, b *big.Int, small bool) (uint64, bool) {
	if small {
		return uint64(n), n >= 0
	}
	if b.Sign() < 0 || b.Cmp(maxUint64) > 0 {
		return 0, false
	}
	return b.Uint64(), true
}

func readUint64(r ion.Reader) (uint64, error) {
	n, b, small, err := readIonInt(r)
	if err != nil {
		return 0, err
	}
	u, ok := uint64Of(n, b, small)
	switch {
	case ok:
		return u, nil
	case small:
		return 0, badValue("%d is negative for an unsigned column", n)
	default:
		return 0, badValue("%s is out of range for UInt64", shortNumber(b.String()))
	}
}

// readLSN reads metadata.source.lsn: an Ion int in 1..2^64-1 (seed:
// integer(source_info["lsn"], "source LSN", 1, 2**64 - 1)).
func readLSN(r ion.Reader) (uint64, error) {
	if r.Type() == ion.DecimalType && !r.IsNull() {
		b, err := integralDecimal(r, colType{kind: kindUint, bits: 64})
		if err != nil {
			return 0, fmt.Errorf("%w: expected an Ion int, got %s", ErrBadLSN, describe(r))
		}
		if b.Sign() <= 0 || b.Cmp(maxUint64) > 0 {
			return 0, fmt.Errorf("%w: %s is outside 1..18446744073709551615", ErrBadLSN, shortNumber(b.String()))
		}
		return b.Uint64(), nil
	}
	if r.Type() != ion.IntType || r.IsNull() {
		return 0, fmt.Errorf("%w: expected an Ion int, got %s", ErrBadLSN, describe(r))
	}
	n, b, small, err := readIonInt(r)
	if err != nil {
		return 0, err
	}
	if u, ok := uint64Of(n, b, small); ok && u >= 1 {
		return u, nil
	}
	v := strconv.FormatInt(n, 10)
	if !small {
		v = shortNumber(b.String())
	}
	return 0, fmt.Errorf("%w: %s is outside 1..18446744073709551615", ErrBadLSN, v)
}

func describe(r ion.Reader) string {
	if r.IsNull() {
		return "null"
	}
	return "an Ion " + r.Type().String()
}

var (
	bigTen = big.NewInt(10)
)

func pow10(n int) *big.Int { return new(big.Int).Exp(bigTen, big.NewInt(int64(n)), nil) }

// convertDecimal reads an Ion decimal, int, decimal string
// (decimal.handling.mode=string) or Debezium's VariableScaleDecimal struct
// {scale: int, value: blob} (an unconstrained numeric) into Decimal(P, S)
// without rounding.
func convertDecimal(r ion.Reader, t colType, typ ion.Type, str string, haveStr bool) (value, error) {
	var coef *big.Int
	var exp int64
	switch typ {
	case ion.DecimalType:
		d, err := r.DecimalValue()
		if err != nil || d == nil {
			return value{}, malformedValue(err)
		}
		c, e := d.CoEx()
		coef, exp = c, int64(e)
	case ion.IntType:
		b, err := r.BigIntValue()
		if err != nil || b == nil {
			return value{}, malformedValue(err)
		}
		coef = b
	case ion.StringType:
		if !haveStr {
			return value{}, wrongType(t, typ)
		}
		d, err := ion.ParseDecimal(strings.Replace(strings.TrimSpace(str), "E", "d", 1))
		if err != nil {
			return value{}, badValue("the string is not a decimal number")
		}
		c, e := d.CoEx()
		coef, exp = c, int64(e)
	case ion.StructType:
		c, e, err := readVariableScale(r)
		if err != nil {
			return value{}, err
		}
		coef, exp = c, e
	default:
		return value{}, wrongType(t, typ)
	}
	unscaled, err := rescale(coef, exp, t)
	if err != nil {
		return value{}, err
	}
	return value{s: unscaled.String()}, nil
}

// rescale returns coef × 10^exp as an unscaled integer at t.scale, refusing
// lost digits and values with more than t.prec digits. Work is bounded: no
// power of ten above 10^(prec+digits) is ever computed.
func rescale(coef *big.Int, exp int64, t colType) (*big.Int, error) {
	if coef.Sign() == 0 {
		return new(big.Int), nil
	}
	digits := int64(len(new(big.Int).Abs(coef).String()))
	shift := exp + int64(t.scale)
	if digits+shift > int64(t.prec) {
		return nil, badValue("%s does not fit Decimal(%d, %d)", decimalText(coef, exp), t.prec, t.scale)
	}
	if shift >= 0 {
		return new(big.Int).Mul(coef, pow10(int(shift))), nil
	}
	if -shift > digits {
		return nil, badValue("%s has more than %d decimal places", decimalText(coef, exp), t.scale)
	}
	q, rem := new(big.Int).QuoRem(coef, pow10(int(-shift)), new(big.Int))
	if rem.Sign() != 0 {
		return nil, badValue("%s has more than %d decimal places", decimalText(coef, exp), t.scale)
	}
	return q, nil
}

func decimalText(coef *big.Int, exp int64) string {
	return shortNumber(fullDecimalText(coef, exp))
}

func fullDecimalText(coef *big.Int, exp int64) string {
	switch {
	case exp < -60 || exp > 60:
		return fmt.Sprintf("%se%d", coef.String(), exp)
	case exp >= 0:
		return coef.String() + strings.Repeat("0", int(exp))
	}
	return string(appendDecimal(nil, coef.String(), int(-exp)))
}

// readVariableScale reads Debezium's io.debezium.data.VariableScaleDecimal,
// {scale: int, value: blob of the big-endian two's-complement unscaled value}.
func readVariableScale(r ion.Reader) (*big.Int, int64, error) {
	if err := r.StepIn(); err != nil {
		return nil, 0, malformedValue(err)
	}
	var scale *int64
	var raw []byte
	var haveRaw bool
	var bad error // the first problem; the walk goes on to the struct's end
	for r.Next() {
		f, err := r.FieldName()
		if err != nil || f == nil || f.Text == nil {
			return nil, 0, malformedValue(err)
		}
		if bad != nil {
			continue
		}
		switch *f.Text {
		case "scale":
			if r.Type() != ion.IntType || r.IsNull() {
				bad = badValue("{scale, value} struct: scale is not an int")
				continue
			}
			n, err := r.Int64Value()
			if err != nil || n == nil || *n < -1000 || *n > 1000 {
				bad = badValue("{scale, value} struct: scale out of range")
				continue
			}
			scale = n
		case "value":
			if r.Type() != ion.BlobType || r.IsNull() {
				bad = badValue("{scale, value} struct: value is not a blob")
				continue
			}
			b, err := r.ByteValue()
			if err != nil || len(b) > 64 {
				bad = badValue("{scale, value} struct: value is not a blob of at most 64 bytes")
				continue
			}
			raw, haveRaw = b, true
		default:
			bad = badValue("a struct with field %q; expected Debezium's {scale, value} decimal", *f.Text)
		}
	}
	if err := r.Err(); err != nil {
		return nil, 0, malformedValue(err)
	}
	if err := r.StepOut(); err != nil {
		return nil, 0, malformedValue(err)
	}
	if bad != nil {
		return nil, 0, bad
	}
	if scale == nil || !haveRaw {
		return nil, 0, badValue("a struct that is not Debezium's {scale, value} decimal")
	}
	n := new(big.Int).SetBytes(raw)
	if len(raw) > 0 && raw[0]&0x80 != 0 {
		n.Sub(n, new(big.Int).Lsh(big.NewInt(1), uint(8*len(raw))))
	}
	return n, -*scale, nil
}

// parseDateTimeString parses the annotated strings Kestra writes for
// java.time values: ZonedDateTime::"2024-01-15T10:30:00.123456Z" (a
// [Region] suffix is ignored; the offset is authoritative),
// OffsetDateTime::"…+01:00", and LocalDateTime::"2024-01-15T10:30:00",
// which has no offset and is read in the column's time zone (UTC when the
// column has none).
func parseDateTimeString(s string, loc *time.Location) (time.Time, error) {
	if i := strings.IndexByte(s, '['); i > 0 && strings.HasSuffix(s, "]") {
		s = s[:i]
	}
	if tm, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return tm, nil
	}
	if tm, err := time.Parse("2006-01-02T15:04Z07:00", s); err == nil {
		return tm, nil
	}
	if loc == nil {
		loc = time.UTC
	}
	for _, layout := range []string{"2006-01-02T15:04:05.999999999", "2006-01-02T15:04"} {
		if tm, err := time.ParseInLocation(layout, s, loc); err == nil {
			return tm, nil
		}
	}
	return time.Time{}, badValue("the string is not an ISO 8601 date-time")
}

// timeValue converts an instant to a DateTime (seconds) or DateTime64
// (ticks) value, refusing sub-tick digits and out-of-range instants.
func timeValue(tm time.Time, t colType) (value, error) {
	sec, nsec := tm.Unix(), int64(tm.Nanosecond())
	if t.kind == kindDateTime {
		if nsec != 0 {
			return value{}, badValue("%s has fractions of a second; DateTime stores whole seconds (use DateTime64)", tm.UTC().Format(time.RFC3339Nano))
		}
		if sec < 0 || sec > math.MaxUint32 {
			return value{}, badValue("%s is outside the DateTime range 1970-01-01..2106-02-07", tm.UTC().Format(time.RFC3339))
		}
		return value{n: uint64(sec)}, nil
	}
	if sec < minDateTime64 || sec > maxDateTime64 {
		return value{}, badValue("%s is outside the DateTime64 range 1900-01-01..2299-12-31", tm.UTC().Format(time.RFC3339Nano))
	}
	per := t.ticksPerSecond()
	unit := int64(1_000_000_000) / per
	if nsec%unit != 0 {
		return value{}, badValue("%s has more sub-second digits than DateTime64(%d)", tm.UTC().Format(time.RFC3339Nano), t.prec)
	}
	return value{n: uint64(sec*per + nsec/unit)}, nil
}

// zeroValue is what a delete writes in a non-key column: the seed writes 0
// and "" for a delete's other columns; Nullable columns get NULL.
func zeroValue(t colType) value {
	switch {
	case t.nullable:
		return value{null: true}
	case t.kind == kindDecimal:
		return value{s: "0"}
	case t.kind == kindUUID:
		return value{s: string(make([]byte, 16))}
	}
	return value{}
}
