package pgvalue

// Parsers of PostgreSQL's text output (the types' output functions under
// DateStyle ISO): strict, allocation-free, each returning ok false for
// bytes PostgreSQL does not print for the type.

// special is numeric's and the date types' values beyond the numbers.
type special uint8

const (
	finite     special = iota
	nan                // numeric 'NaN'
	posInf             // numeric 'Infinity', date and timestamp 'infinity'
	negInf             // numeric '-Infinity', date and timestamp '-infinity'
	specialEnd         // (bound)
)

// number is a numeric's text split: the sign, the integer digits without
// leading zeros ("" for zero) and the fraction digits as printed.
type number struct {
	special special
	neg     bool
	whole   []byte
	frac    []byte
}

// parseNumber reads numeric_out's text ([-]digits[.digits], NaN,
// Infinity, -Infinity) and int2/4/8out's ([-]digits).
func parseNumber(b []byte) (number, bool) {
	switch string(b) { // no allocation: the compiler compares in place
	case "NaN":
		return number{special: nan}, true
	case "Infinity":
		return number{special: posInf}, true
	case "-Infinity":
		return number{special: negInf, neg: true}, true
	}
	var n number
	if len(b) > 0 && b[0] == '-' {
		n.neg, b = true, b[1:]
	}
	i := 0
	for i < len(b) && isDigit(b[i]) {
		i++
	}
	if i == 0 {
		return number{}, false
	}
	n.whole = trimZeros(b[:i])
	if i < len(b) {
		if b[i] != '.' || i+1 == len(b) {
			return number{}, false
		}
		n.frac = b[i+1:]
		for _, c := range n.frac {
			if !isDigit(c) {
				return number{}, false
			}
		}
	}
	return n, true
}

// trimZeros drops leading zeros.
func trimZeros(d []byte) []byte {
	for len(d) > 0 && d[0] == '0' {
		d = d[1:]
	}
	return d
}

// fracZero reports a fraction of zeros only.
func fracZero(d []byte) bool {
	for _, c := range d {
		if c != '0' {
			return false
		}
	}
	return true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// uint64Of reads digits (at most 20) as a uint64; ok is false on overflow.
func uint64Of(d []byte) (uint64, bool) {
	if len(d) > 20 {
		return 0, false
	}
	var n uint64
	for _, c := range d {
		v := uint64(c - '0')
		if n > (1<<64-1-v)/10 {
			return 0, false
		}
		n = n*10 + v
	}
	return n, true
}

// floatText reports bytes float4out and float8out can print: digits, a
// point, an exponent, a sign, or NaN, Infinity, -Infinity (so that
// strconv.ParseFloat's other syntaxes, such as hex floats and "inf", are
// refused).
func floatText(b []byte) bool {
	switch string(b) {
	case "NaN", "Infinity", "-Infinity":
		return true
	}
	digits := false
	for _, c := range b {
		switch {
		case isDigit(c):
			digits = true
		case c == '.' || c == 'e' || c == '-' || c == '+':
		default:
			return false
		}
	}
	return digits
}

// stamp is a date or timestamp as printed (DateStyle ISO).
type stamp struct {
	special special
	year    int64 // astronomical: 1 BC is 0, 2 BC is -1
	month   int64
	day     int64
	secs    int64 // seconds into the day
	micros  int64 // 0..999999
	offset  int64 // seconds east of UTC (timestamptz)
}

// parseDate reads date_out's text: YYYY-MM-DD (the year in four or more
// digits), " BC" after a year before 1, infinity, -infinity.
func parseDate(b []byte) (stamp, bool) {
	if s, ok := infinity(b); ok {
		return stamp{special: s}, true
	}
	st, rest, ok := parseYMD(b)
	if !ok {
		return stamp{}, false
	}
	rest, ok = bcSuffix(rest, &st)
	return st, ok && len(rest) == 0
}

// parseTimestamp reads timestamp_out's text, and timestamptz_out's when
// zoned: YYYY-MM-DD hh:mm:ss[.f…], then for timestamptz the offset ±hh,
// ±hh:mm or ±hh:mm:ss (historical local mean times have seconds), then
// " BC" for a year before 1; or infinity, -infinity.
func parseTimestamp(b []byte, zoned bool) (stamp, bool) {
	if s, ok := infinity(b); ok {
		return stamp{special: s}, true
	}
	st, rest, ok := parseYMD(b)
	if !ok || len(rest) < 9 || rest[0] != ' ' || rest[3] != ':' || rest[6] != ':' {
		return stamp{}, false
	}
	h, ok1 := two(rest[1:3])
	m, ok2 := two(rest[4:6])
	s, ok3 := two(rest[7:9])
	if !ok1 || !ok2 || !ok3 || h > 23 || m > 59 || s > 59 {
		return stamp{}, false
	}
	st.secs = h*3600 + m*60 + s
	rest = rest[9:]
	if len(rest) > 0 && rest[0] == '.' {
		n := 0
		for n < len(rest)-1 && n < 7 && isDigit(rest[1+n]) {
			n++
		}
		if n == 0 || n > 6 {
			return stamp{}, false
		}
		for i := range 6 {
			st.micros *= 10
			if i < n {
				st.micros += int64(rest[1+i] - '0')
			}
		}
		rest = rest[1+n:]
	}
	if zoned {
		if rest, ok = parseOffset(rest, &st); !ok {
			return stamp{}, false
		}
	}
	rest, ok = bcSuffix(rest, &st)
	return st, ok && len(rest) == 0
}

func infinity(b []byte) (special, bool) {
	switch string(b) {
	case "infinity":
		return posInf, true
	case "-infinity":
		return negInf, true
	}
	return finite, false
}

// parseYMD reads YYYY-MM-DD with a year of 4 to 7 digits (PostgreSQL's
// dates end in 5874897).
func parseYMD(b []byte) (stamp, []byte, bool) {
	n := 0
	for n < len(b) && isDigit(b[n]) {
		n++
	}
	if n < 4 || n > 7 || len(b) < n+6 || b[n] != '-' || b[n+3] != '-' {
		return stamp{}, nil, false
	}
	var y int64
	for _, c := range b[:n] {
		y = y*10 + int64(c-'0')
	}
	m, ok1 := two(b[n+1 : n+3])
	d, ok2 := two(b[n+4 : n+6])
	if !ok1 || !ok2 || y == 0 || m < 1 || m > 12 || d < 1 {
		return stamp{}, nil, false
	}
	return stamp{year: y, month: m, day: d}, b[n+6:], true
}

// bcSuffix reads " BC" and turns the year astronomical, then checks the
// day against the month (leap years counted on the astronomical year, as
// PostgreSQL's proleptic Gregorian calendar does).
func bcSuffix(rest []byte, st *stamp) ([]byte, bool) {
	if len(rest) >= 3 && string(rest[:3]) == " BC" {
		st.year, rest = 1-st.year, rest[3:]
	}
	return rest, st.day <= daysIn(st.year, st.month)
}

// parseOffset reads ±hh[:mm[:ss]].
func parseOffset(b []byte, st *stamp) ([]byte, bool) {
	if len(b) < 3 || (b[0] != '+' && b[0] != '-') {
		return nil, false
	}
	sign := int64(1)
	if b[0] == '-' {
		sign = -1
	}
	h, ok := two(b[1:3])
	if !ok {
		return nil, false
	}
	off, b := h*3600, b[3:]
	for unit := int64(60); unit >= 1 && len(b) >= 3 && b[0] == ':'; unit /= 60 {
		v, ok := two(b[1:3])
		if !ok || v > 59 {
			return nil, false
		}
		off, b = off+v*unit, b[3:]
	}
	st.offset = sign * off
	return b, true
}

func two(b []byte) (int64, bool) {
	if !isDigit(b[0]) || !isDigit(b[1]) {
		return 0, false
	}
	return int64(b[0]-'0')*10 + int64(b[1]-'0'), true
}

func daysIn(y, m int64) int64 {
	switch m {
	case 2:
		if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// daysFromCivil counts days from 1970-01-01 to y-m-d of the proleptic
// Gregorian calendar (astronomical year), negative before.
func daysFromCivil(y, m, d int64) int64 {
	if m <= 2 {
		y--
	}
	era := floorDiv(y, 400)
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

// civilFromDays is daysFromCivil's inverse.
func civilFromDays(z int64) (y, m, d int64) {
	z += 719468
	era := floorDiv(z, 146097)
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d = doy - (153*mp+2)/5 + 1
	m = mp + 3
	if m > 12 {
		m -= 12
	}
	y = yoe + era*400
	if m <= 2 {
		y++
	}
	return y, m, d
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// unix is the stamp's instant in seconds since the Unix epoch (micros
// apart).
func (st stamp) unix() int64 {
	return daysFromCivil(st.year, st.month, st.day)*86400 + st.secs - st.offset
}

// appendStamp appends the String form of a timestamp: YYYY-MM-DD
// hh:mm:ss.ffffff of the instant sec (+ micros) in UTC; a year beyond 9999
// in its digits, a year before 1 as PostgreSQL prints it (the year before
// the era, " BC" at the end).
func appendStamp(dst []byte, sec, micros int64) []byte {
	days, tod := floorDiv(sec, 86400), sec-floorDiv(sec, 86400)*86400
	y, m, d := civilFromDays(days)
	bc := y < 1
	if bc {
		y = 1 - y
	}
	dst = appendYear(dst, y)
	dst = append(dst, '-')
	dst = append2(dst, m)
	dst = append(dst, '-')
	dst = append2(dst, d)
	dst = append(dst, ' ')
	dst = append2(dst, tod/3600)
	dst = append(dst, ':')
	dst = append2(dst, tod/60%60)
	dst = append(dst, ':')
	dst = append2(dst, tod%60)
	dst = append(dst, '.')
	for div := int64(100000); div >= 1; div /= 10 {
		dst = append(dst, byte('0'+micros/div%10))
	}
	if bc {
		dst = append(dst, " BC"...)
	}
	return dst
}

// appendYear appends y in at least four digits.
func appendYear(dst []byte, y int64) []byte {
	var buf [20]byte
	i := len(buf)
	for y > 0 || i > len(buf)-4 {
		i--
		buf[i] = byte('0' + y%10)
		y /= 10
	}
	return append(dst, buf[i:]...)
}

func append2(dst []byte, v int64) []byte {
	return append(dst, byte('0'+v/10), byte('0'+v%10))
}

// parseUUID reads uuid_out's text (8-4-4-4-12 hex digits) into dst.
func parseUUID(b []byte, dst *[16]byte) bool {
	if len(b) != 36 || b[8] != '-' || b[13] != '-' || b[18] != '-' || b[23] != '-' {
		return false
	}
	j := 0
	for i := 0; i < 36; {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			i++
			continue
		}
		hi, ok1 := unhex(b[i])
		lo, ok2 := unhex(b[i+1])
		if !ok1 || !ok2 {
			return false
		}
		dst[j] = hi<<4 | lo
		i, j = i+2, j+1
	}
	return true
}

const hexDigits = "0123456789abcdef"

// appendUUID appends the canonical lower-case text of a UUID.
func appendUUID(dst []byte, u *[16]byte) []byte {
	for i, c := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			dst = append(dst, '-')
		}
		dst = append(dst, hexDigits[c>>4], hexDigits[c&15])
	}
	return dst
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
