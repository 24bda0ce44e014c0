package decode

import (
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"

	"github.com/amazon-ion/ion-go/ion"
	"github.com/google/uuid"

	"github.com/changesink/changesink/tasks/cdc/internal/ionrec"
)

func wrongType(t mapping.Type, got ion.Type) error {
	switch got {
	case ion.StructType:
		return change.BadValue("expected %s for %s, got an Ion struct (an unconstrained numeric: {scale, value})", expectedIon(t), t)
	case ion.DecimalType:
		return change.BadValue("expected %s for %s, got an Ion decimal (a numeric(p,s))", expectedIon(t), t)
	case ion.BlobType:
		return change.BadValue("expected %s for %s, got an Ion blob (a bytea)", expectedIon(t), t)
	}
	return change.BadValue("expected %s for %s, got an Ion %s", expectedIon(t), t, got)
}

func expectedIon(t mapping.Type) string {
	switch t.Kind {
	case mapping.KindInt, mapping.KindUint:
		return "an Ion int (or a decimal without fraction digits, 5.)"
	case mapping.KindFloat32, mapping.KindFloat64:
		return "an Ion float"
	case mapping.KindDecimal:
		return "an Ion decimal or int (or a decimal string, or Debezium's {scale, value} struct)"
	case mapping.KindString:
		return "an Ion string, symbol or blob"
	case mapping.KindBool:
		return "an Ion bool"
	case mapping.KindDate:
		return "an Ion day timestamp (2024-01-15) or a LocalDate string"
	case mapping.KindDateTime, mapping.KindDateTime64:
		return "an Ion timestamp or a ZonedDateTime/OffsetDateTime/LocalDateTime string"
	case mapping.KindUUID:
		return "an Ion string holding a UUID"
	}
	return "a value"
}

// convert reads a column's scalar as the column's canonical value: the
// one place each column type reads, checks and encodes what the batch
// holds. It implements the seed's value checks, generalised: integers in
// range and never booleans (Ion keeps the types apart), strings within
// max_length counted in code points like Python's len(), null only in
// Nullable columns; and refuses every lossy conversion (more decimal digits
// than the scale, more sub-second digits than the precision, a double that
// is not a float32) instead of rounding. Debezium's TOAST placeholder, in
// any form (a string, a symbol, or a blob for a bytea) and any column, is
// read as Value.Toast: the value the row held before (finish and the batch
// decide whether it can be known).
func convert(s *ionrec.Scalar, c *mapping.Col) (change.Value, error) {
	t := c.Type
	if s.Null {
		if t.Nullable {
			return change.Value{Null: true}, nil
		}
		return change.Value{}, change.BadValue("null in a column that is not Nullable (%s)", t)
	}
	if s.Type == ion.StringType && !utf8.Valid(s.Bytes) {
		return change.Value{}, errNotUTF8
	}
	if isToastPlaceholder(s) {
		return change.Value{Toast: true}, nil
	}
	if t.Kind == mapping.KindString {
		switch c.Source {
		case mapping.PGTimestamp, mapping.PGTimestamptz:
			return timestampText(s, c)
		case mapping.PGDate:
			return dateText(s, c)
		case mapping.PGNumeric:
			return numericText(s, c)
		case mapping.PGUUID:
			return uuidText(s, c)
		}
		if s.Type == ion.BlobType || s.Type == ion.ClobType {
			return blobValue(s, c)
		}
	}
	switch t.Kind {
	case mapping.KindInt:
		return intValue(s, t)
	case mapping.KindUint:
		return uintValue(s, t)
	case mapping.KindFloat32, mapping.KindFloat64:
		return floatColumnValue(s, t)
	case mapping.KindDecimal:
		return decimalValue(s, t)
	case mapping.KindString:
		return stringValue(s, c)
	case mapping.KindBool:
		return boolValue(s, t)
	case mapping.KindDate:
		return dateValue(s, t)
	case mapping.KindDateTime, mapping.KindDateTime64:
		return dateTimeValue(s, t)
	case mapping.KindUUID:
		return uuidValue(s, t)
	}
	return change.Value{}, change.BadValue("unsupported column kind")
}

// isToastPlaceholder reports Debezium's placeholder in any of the forms it
// arrives in: a string (text, varchar, jsonb), a blob of its bytes (bytea),
// or a symbol or clob.
func isToastPlaceholder(s *ionrec.Scalar) bool {
	switch s.Type {
	case ion.StringType, ion.BlobType, ion.ClobType:
	case ion.SymbolType:
		if s.NoText {
			return false
		}
	default:
		return false
	}
	return string(s.Bytes) == change.ToastPlaceholder
}

// Int8..Int64: an Ion int, or a decimal written without fraction digits.
func intValue(s *ionrec.Scalar, t mapping.Type) (change.Value, error) {
	var n number
	switch s.Type {
	case ion.DecimalType:
		var err error
		if n, err = integralDecimal(s, t); err != nil {
			return change.Value{}, err
		}
	case ion.IntType:
		n = intOf(s)
	default:
		return change.Value{}, wrongType(t, s.Type)
	}
	v, ok := n.int64()
	if !ok {
		return change.Value{}, change.BadValue("%s is out of range for Int%d", change.ShortNumber(n.String()), t.Bits)
	}
	return checkInt(v, t)
}

// UInt8..UInt64: an Ion int, or a decimal written without fraction digits.
func uintValue(s *ionrec.Scalar, t mapping.Type) (change.Value, error) {
	var u uint64
	switch s.Type {
	case ion.DecimalType:
		n, err := integralDecimal(s, t)
		if err != nil {
			return change.Value{}, err
		}
		var ok bool
		if u, ok = n.uint64(); !ok {
			return change.Value{}, change.BadValue("%s is out of range for UInt%d", change.ShortNumber(n.String()), t.Bits)
		}
	case ion.IntType:
		n := intOf(s)
		var ok bool
		if u, ok = n.uint64(); !ok {
			if v, small := n.int64(); small {
				return change.Value{}, change.BadValue("%d is negative for an unsigned column", v)
			}
			return change.Value{}, change.BadValue("%s is out of range for UInt64", change.ShortNumber(n.String()))
		}
	default:
		return change.Value{}, wrongType(t, s.Type)
	}
	if t.Bits < 64 && u >= uint64(1)<<t.Bits {
		return change.Value{}, change.BadValue("%d is out of range for UInt%d", u, t.Bits)
	}
	return change.Value{N: u}, nil
}

// Float32, Float64: an Ion float; a Float32 only when exactly a float32.
func floatColumnValue(s *ionrec.Scalar, t mapping.Type) (change.Value, error) {
	if s.Type != ion.FloatType {
		return change.Value{}, wrongType(t, s.Type)
	}
	f := s.Float
	if t.Kind == mapping.KindFloat32 && !math.IsNaN(f) && float64(float32(f)) != f {
		return change.Value{}, change.BadValue("%v is not exactly a Float32 (a PostgreSQL real arrives widened exactly; map a double precision column to Float64)", f)
	}
	return change.FloatValue(f), nil
}

// String: an Ion string, symbol, blob or clob, within max_length.
func stringValue(s *ionrec.Scalar, c *mapping.Col) (change.Value, error) {
	switch s.Type {
	case ion.StringType:
	case ion.SymbolType:
		if s.NoText {
			return change.Value{}, change.BadValue("a symbol without text")
		}
	default:
		return change.Value{}, wrongType(c.Type, s.Type)
	}
	if c.MaxLen > 0 && len(s.Bytes) > c.MaxLen {
		if n := utf8.RuneCount(s.Bytes); n > c.MaxLen {
			return change.Value{}, change.BadValue("%d characters exceed max_length %d", n, c.MaxLen)
		}
	}
	return change.Value{S: string(s.Bytes)}, nil
}

func blobValue(s *ionrec.Scalar, c *mapping.Col) (change.Value, error) {
	if c.MaxLen > 0 && len(s.Bytes) > c.MaxLen {
		return change.Value{}, change.BadValue("%d bytes exceed max_length %d", len(s.Bytes), c.MaxLen)
	}
	return change.Value{S: string(s.Bytes)}, nil
}

// Bool: an Ion bool.
func boolValue(s *ionrec.Scalar, t mapping.Type) (change.Value, error) {
	if s.Type != ion.BoolType {
		return change.Value{}, wrongType(t, s.Type)
	}
	if s.Bool {
		return change.Value{N: 1}, nil
	}
	return change.Value{N: 0}, nil
}

// Date: a day timestamp, or a LocalDate string.
func dateValue(s *ionrec.Scalar, t mapping.Type) (change.Value, error) {
	var day time.Time
	switch s.Type {
	case ion.TimestampType:
		if s.Prec != ion.TimestampPrecisionDay {
			return change.Value{}, change.BadValue("a timestamp with precision %v for a Date column; a date arrives as a day timestamp such as 2024-01-15", s.Prec)
		}
		day = s.Time()
	case ion.StringType:
		d, err := time.Parse("2006-01-02", string(s.Bytes))
		if err != nil {
			return change.Value{}, change.BadValue("the string is not a date YYYY-MM-DD")
		}
		day = d
	default:
		return change.Value{}, wrongType(t, s.Type)
	}
	days := time.Date(day.Year(), day.Month(), day.Day(), 0, 0, 0, 0, time.UTC).Unix() / 86400
	if days < 0 || days > mapping.MaxDateDays {
		return change.Value{}, change.BadValue("%s is outside the Date range 1970-01-01..2149-06-06", day.Format("2006-01-02"))
	}
	return change.Value{N: uint64(days)}, nil
}

// DateTime, DateTime64: a timestamp with a time, or a java.time string.
func dateTimeValue(s *ionrec.Scalar, t mapping.Type) (change.Value, error) {
	var tm time.Time
	switch s.Type {
	case ion.TimestampType:
		if s.Prec < ion.TimestampPrecisionMinute {
			return change.Value{}, change.BadValue("a date without a time (%v precision) for %s", s.Prec, t)
		}
		tm = s.Time()
	case ion.StringType:
		parsed, err := parseDateTimeString(string(s.Bytes), t.Loc)
		if err != nil {
			return change.Value{}, err
		}
		tm = parsed
	default:
		return change.Value{}, wrongType(t, s.Type)
	}
	return timeValue(tm, t)
}

// UUID: a string holding a UUID.
func uuidValue(s *ionrec.Scalar, t mapping.Type) (change.Value, error) {
	if s.Type != ion.StringType {
		return change.Value{}, wrongType(t, s.Type)
	}
	u, err := uuid.ParseBytes(s.Bytes)
	if err != nil {
		return change.Value{}, change.BadValue("the string is not a UUID")
	}
	return change.Value{S: string(u[:])}, nil
}

func checkInt(n int64, t mapping.Type) (change.Value, error) {
	lim := int64(1) << (t.Bits - 1)
	if t.Bits < 64 && (n < -lim || n >= lim) {
		return change.Value{}, change.BadValue("%d is out of range for Int%d", n, t.Bits)
	}
	return change.Value{N: uint64(n)}, nil
}

// integralDecimal reads an Ion decimal written without fraction digits
// (5.) as an integer. The seed accepts exactly these: IonToJson writes them
// as JSON integers, while 5.0 becomes the float 5.0, which it refuses.
func integralDecimal(s *ionrec.Scalar, t mapping.Type) (number, error) {
	if s.Exp != 0 {
		return number{}, change.BadValue("expected an Ion int for %s, got the decimal %s", t, change.ShortNumber(decimalString(s)))
	}
	return number{neg: s.Neg, mag: s.Mag, big: s.Big}, nil
}

// decimalString renders a decimal scalar as ion-go prints it.
func decimalString(s *ionrec.Scalar) string {
	return ion.NewDecimal(number{neg: s.Neg, mag: s.Mag, big: s.Big}.bigInt(), s.Exp, s.NegZero).String()
}

// number is an integer as read: a sign and a 64-bit magnitude, or big.
type number struct {
	neg bool
	mag uint64
	big *big.Int
}

func intOf(s *ionrec.Scalar) number { return number{neg: s.Neg, mag: s.Mag, big: s.Big} }

func (n number) int64() (int64, bool) {
	switch {
	case n.big != nil:
		return n.big.Int64(), n.big.IsInt64()
	case n.neg:
		// -2^63 is the one magnitude beyond MaxInt64 that fits.
		return -int64(n.mag), n.mag <= 1<<63
	}
	return int64(n.mag), n.mag <= math.MaxInt64
}

func (n number) uint64() (uint64, bool) {
	switch {
	case n.big != nil:
		return n.big.Uint64(), n.big.IsUint64()
	case n.neg && n.mag != 0:
		return 0, false
	}
	return n.mag, true
}

func (n number) bigInt() *big.Int {
	if n.big != nil {
		return n.big
	}
	b := new(big.Int).SetUint64(n.mag)
	if n.neg {
		b.Neg(b)
	}
	return b
}

func (n number) String() string {
	if n.big != nil {
		return n.big.String()
	}
	if n.neg && n.mag != 0 {
		return "-" + strconv.FormatUint(n.mag, 10)
	}
	return strconv.FormatUint(n.mag, 10)
}

// errNotUTF8 refuses a text Ion string whose bytes are not UTF-8 (ion-go's
// binary reader refuses them itself; its text reader passes them through):
// the file is corrupt. The reader is intact, so unlike other malformed
// input the record's key and LSN are still read and named.
var errNotUTF8 = fmt.Errorf("%w: a string that is not valid UTF-8 (the batch file is corrupt)", change.ErrMalformed)

// readLSN reads metadata.source.lsn: an Ion int in 1..2^64-1 (seed:
// integer(source_info["lsn"], "source LSN", 1, 2**64 - 1)); a decimal
// without fraction digits passes, as IonToJson makes an integer of it.
func readLSN(s *ionrec.Scalar) (uint64, error) {
	var n number
	switch {
	case s.Type == ion.DecimalType && !s.Null:
		if s.Exp != 0 {
			return 0, fmt.Errorf("%w: expected an Ion int, got %s", change.ErrBadLSN, describe(s))
		}
		n = intOf(s)
	case s.Type == ion.IntType && !s.Null:
		n = intOf(s)
	default:
		return 0, fmt.Errorf("%w: expected an Ion int, got %s", change.ErrBadLSN, describe(s))
	}
	if u, ok := n.uint64(); ok && u >= 1 {
		return u, nil
	}
	return 0, fmt.Errorf("%w: %s is outside 1..18446744073709551615", change.ErrBadLSN, change.ShortNumber(n.String()))
}

// decimalValue reads an Ion decimal, int, decimal string
// (decimal.handling.mode=string) or Debezium's VariableScaleDecimal struct
// {scale: int, value: blob} (an unconstrained numeric, read by
// readVariableScale) into Decimal(P, S) without rounding.
func decimalValue(s *ionrec.Scalar, t mapping.Type) (change.Value, error) {
	coef, exp, err := decimalParts(s, t)
	if err != nil {
		return change.Value{}, err
	}
	unscaled, err := change.Rescale(coef, exp, t)
	if err != nil {
		return change.Value{}, err
	}
	return change.Value{S: unscaled.String()}, nil
}

// decimalParts reads the shapes decimalValue takes as coef × 10^exp.
func decimalParts(s *ionrec.Scalar, t mapping.Type) (*big.Int, int64, error) {
	switch s.Type {
	case ion.DecimalType, ion.IntType:
		return intOf(s).bigInt(), int64(s.Exp), nil
	case ion.StringType:
		d, err := ion.ParseDecimal(strings.Replace(strings.TrimSpace(string(s.Bytes)), "E", "d", 1))
		if err != nil {
			return nil, 0, change.BadValue("the string is not a decimal number")
		}
		c, e := d.CoEx()
		return c, int64(e), nil
	case ion.StructType:
		switch {
		case s.VarScale: // read by ionrec
			return twosComplement(s.Bytes), int64(s.Exp), nil
		case s.Big != nil: // read by readVariableScale
			return s.Big, int64(s.Exp), nil
		}
	}
	return nil, 0, wrongType(t, s.Type)
}

// The String renderings a source_type asks for: one exact text per value,
// whichever form the trigger wrote it in.

// timeTextLayout is how a String column holds a timestamp or timestamptz:
// ClickHouse's own text of DateTime64(6, 'UTC'), in UTC, so that it sorts
// and compares as time, and ALTER TABLE … MODIFY COLUMN … DateTime64(6,
// 'UTC') on a newer server converts it exactly.
const timeTextLayout = "2006-01-02 15:04:05.000000"

// timestampText reads a timestamp or timestamptz (Kestra 2.x writes six
// fraction digits and 1.x as few as needed; a timestamptz carries the
// worker JVM's offset) as its UTC instant in timeTextLayout.
func timestampText(s *ionrec.Scalar, c *mapping.Col) (change.Value, error) {
	var tm time.Time
	switch s.Type {
	case ion.StringType:
		parsed, err := parseDateTimeString(string(s.Bytes), time.UTC)
		if err != nil {
			return change.Value{}, err
		}
		tm = parsed
	case ion.TimestampType:
		if s.Prec < ion.TimestampPrecisionMinute {
			return change.Value{}, change.BadValue("a date without a time (%v precision) for a PostgreSQL %s", s.Prec, c.Source)
		}
		tm = s.Time()
	default:
		return change.Value{}, change.BadValue("expected a string holding an ISO 8601 date-time for a PostgreSQL %s in %s, got an Ion %s", c.Source, c.Type, s.Type)
	}
	tm = tm.UTC()
	if tm.Nanosecond()%1000 != 0 {
		return change.Value{}, change.BadValue("%s has more sub-second digits than a PostgreSQL %s's microseconds", tm.Format(time.RFC3339Nano), c.Source)
	}
	if y := tm.Year(); y < 1 || y > 9999 {
		return change.Value{}, change.BadValue("%s is outside the years 0001..9999 that %s holds as YYYY-MM-DD hh:mm:ss.ffffff", tm.Format(time.RFC3339Nano), c.Type)
	}
	return checkedText(tm.Format(timeTextLayout), c)
}

// dateText reads a date (Debezium writes YYYY-MM-DD) as YYYY-MM-DD.
func dateText(s *ionrec.Scalar, c *mapping.Col) (change.Value, error) {
	var day time.Time
	switch s.Type {
	case ion.StringType:
		d, err := time.Parse("2006-01-02", string(s.Bytes))
		if err != nil {
			return change.Value{}, change.BadValue("the string is not a date YYYY-MM-DD")
		}
		day = d
	case ion.TimestampType:
		if s.Prec != ion.TimestampPrecisionDay {
			return change.Value{}, change.BadValue("a timestamp with precision %v for a PostgreSQL date", s.Prec)
		}
		day = s.Time()
	default:
		return change.Value{}, change.BadValue("expected a string YYYY-MM-DD for a PostgreSQL date in %s, got an Ion %s", c.Type, s.Type)
	}
	return checkedText(day.Format("2006-01-02"), c)
}

// numericText reads a numeric (a decimal with the column's scale, or the
// {scale, value} struct of an unconstrained one) as its exact decimal text,
// with the digits Debezium sent: 12.50, 0.00000000000000000001, -1000.
func numericText(s *ionrec.Scalar, c *mapping.Col) (change.Value, error) {
	switch s.Type {
	case ion.DecimalType, ion.IntType, ion.StringType, ion.StructType:
	default:
		return change.Value{}, change.BadValue("expected an Ion decimal, int or {scale, value} struct for a PostgreSQL numeric in %s, got an Ion %s", c.Type, s.Type)
	}
	coef, exp, err := decimalParts(s, c.Type)
	if err != nil {
		return change.Value{}, err
	}
	if exp > 1000 || exp < -1000 {
		return change.Value{}, change.BadValue("the decimal's exponent %d is outside ±1000", exp)
	}
	var text string
	if exp >= 0 {
		text = coef.String()
		if coef.Sign() != 0 {
			text += strings.Repeat("0", int(exp))
		}
	} else {
		text = string(change.AppendDecimal(nil, coef.String(), int(-exp)))
	}
	return checkedText(text, c)
}

// uuidText reads a uuid as its canonical lower-case text.
func uuidText(s *ionrec.Scalar, c *mapping.Col) (change.Value, error) {
	if s.Type != ion.StringType {
		return change.Value{}, change.BadValue("expected a string holding a UUID for a PostgreSQL uuid in %s, got an Ion %s", c.Type, s.Type)
	}
	u, err := uuid.ParseBytes(s.Bytes)
	if err != nil {
		return change.Value{}, change.BadValue("the string is not a UUID")
	}
	return checkedText(u.String(), c)
}

func checkedText(text string, c *mapping.Col) (change.Value, error) {
	if c.MaxLen > 0 && utf8.RuneCountInString(text) > c.MaxLen {
		return change.Value{}, change.BadValue("%d characters exceed max_length %d", utf8.RuneCountInString(text), c.MaxLen)
	}
	return change.Value{S: text}, nil
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
				bad = change.BadValue("{scale, value} struct: scale is not an int")
				continue
			}
			n, err := r.Int64Value()
			if err != nil || n == nil || *n < -1000 || *n > 1000 {
				bad = change.BadValue("{scale, value} struct: scale out of range")
				continue
			}
			scale = n
		case "value":
			if r.Type() != ion.BlobType || r.IsNull() {
				bad = change.BadValue("{scale, value} struct: value is not a blob")
				continue
			}
			b, err := r.ByteValue()
			if err != nil || len(b) > 64 {
				bad = change.BadValue("{scale, value} struct: value is not a blob of at most 64 bytes")
				continue
			}
			raw, haveRaw = b, true
		default:
			bad = change.BadValue("a struct with field %q; expected Debezium's {scale, value} decimal", *f.Text)
		}
	}
	if err := endStruct(r); err != nil {
		return nil, 0, err
	}
	if bad != nil {
		return nil, 0, bad
	}
	if scale == nil || !haveRaw {
		return nil, 0, change.BadValue("a struct that is not Debezium's {scale, value} decimal")
	}
	return twosComplement(raw), -*scale, nil
}

// twosComplement reads a big-endian two's-complement integer.
func twosComplement(raw []byte) *big.Int {
	n := new(big.Int).SetBytes(raw)
	if len(raw) > 0 && raw[0]&0x80 != 0 {
		n.Sub(n, new(big.Int).Lsh(big.NewInt(1), uint(8*len(raw))))
	}
	return n
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
		if wall, err := time.Parse(layout, s); err == nil {
			return inZone(s, wall, loc)
		}
	}
	return time.Time{}, change.BadValue("the string is not an ISO 8601 date-time")
}

// inZone is the instant the wall-clock time wall (read as UTC) shows in
// loc. A time loc skips (spring forward) or shows twice (fall back) names
// no single instant: time.Date would move it, or pick one, silently.
func inZone(s string, wall time.Time, loc *time.Location) (time.Time, error) {
	if loc == time.UTC {
		return wall, nil
	}
	// Every instant that shows this wall time has one of the offsets loc
	// uses around it (transitions are hours apart, never within two days).
	var found []time.Time
	for _, near := range []time.Duration{-48 * time.Hour, 0, 48 * time.Hour} {
		_, off := wall.Add(near).In(loc).Zone()
		at := wall.Add(-time.Duration(off) * time.Second)
		w := at.In(loc)
		shows := time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), w.Nanosecond(), time.UTC)
		if shows.Equal(wall) && !slices.ContainsFunc(found, at.Equal) {
			found = append(found, at)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return time.Time{}, change.BadValue("%s does not exist in %s (its clocks skip it: daylight saving time begins)", s, loc)
	}
	slices.SortFunc(found, time.Time.Compare)
	at := make([]string, len(found))
	for i, f := range found {
		at[i] = f.UTC().Format(time.RFC3339Nano)
	}
	return time.Time{}, change.BadValue("%s occurs twice in %s (its clocks repeat it: daylight saving time ends): %s",
		s, loc, strings.Join(at, " or "))
}

// timeValue converts an instant to a DateTime (seconds) or DateTime64
// (ticks) value, refusing sub-tick digits and out-of-range instants.
func timeValue(tm time.Time, t mapping.Type) (change.Value, error) {
	sec, nsec := tm.Unix(), int64(tm.Nanosecond())
	if t.Kind == mapping.KindDateTime {
		if nsec != 0 {
			return change.Value{}, change.BadValue("%s has fractions of a second, which %s (whole seconds) would round",
				tm.UTC().Format(time.RFC3339Nano), t)
		}
		if sec < 0 || sec > math.MaxUint32 {
			return change.Value{}, change.BadValue("%s is outside the DateTime range 1970-01-01..2106-02-07", tm.UTC().Format(time.RFC3339))
		}
		return change.Value{N: uint64(sec)}, nil
	}
	if sec < mapping.MinDateTime64 || sec > mapping.MaxDateTime64 {
		return change.Value{}, change.BadValue("%s is outside the DateTime64 range 1900-01-01..2299-12-31", tm.UTC().Format(time.RFC3339Nano))
	}
	per := t.TicksPerSecond()
	unit := int64(1_000_000_000) / per
	if nsec%unit != 0 {
		return change.Value{}, change.BadValue("%s has more sub-second digits than DateTime64(%d)", tm.UTC().Format(time.RFC3339Nano), t.Prec)
	}
	return change.Value{N: uint64(sec*per + nsec/unit)}, nil
}
