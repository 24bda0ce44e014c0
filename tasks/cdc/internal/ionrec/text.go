package ionrec

import (
	"encoding/base64"
	"math"
	"strconv"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/amazon-ion/ion-go/ion"
)

// Text reads line, one line of a text batch holding one record (a struct),
// into rec. It returns ErrFallback when the line holds anything else
// (nothing, several values, a comment, an annotation at top level, ...).
// rec's text may alias line.
func (r *Reader) Text(line []byte, rec *Record) error {
	rec.Reset()
	r.buf = r.buf[:0]
	p := skipSpace(line, 0)
	if p >= len(line) || line[p] != '{' || (p+1 < len(line) && line[p+1] == '{') {
		return ErrFallback
	}
	p, err := r.txtStruct(line, p+1, 0, rec, 0)
	if err != nil {
		return err
	}
	p = skipSpace(line, p)
	if p == len(line)-1 && line[p] == '\r' {
		p++
	}
	if p != len(line) {
		return ErrFallback
	}
	return nil
}

func skipSpace(b []byte, p int) int {
	for p < len(b) && (b[p] == ' ' || b[p] == '\t') {
		p++
	}
	return p
}

// stop reports whether b[p] may end an unquoted value here (what follows is
// checked by the container).
func stop(b []byte, p int) bool {
	if p >= len(b) {
		return true
	}
	switch b[p] {
	case ' ', '\t', ',', '}', ']':
		return true
	}
	return false
}

func identStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == '$'
}

func identPart(c byte) bool { return identStart(c) || c >= '0' && c <= '9' }

// ident reads an identifier at b[p]; ok is false for none, for a keyword
// and for $-names (symbol IDs, system symbols), which ion-go resolves.
func ident(b []byte, p int) (name []byte, next int, ok bool) {
	if p >= len(b) || !identStart(b[p]) || b[p] == '$' {
		return nil, p, false
	}
	q := p + 1
	for q < len(b) && identPart(b[q]) {
		q++
	}
	switch string(b[p:q]) {
	case "null", "true", "false", "nan":
		return nil, p, false
	}
	return b[p:q], q, true
}

// quoted reads a quoted symbol 'text' at b[p] without escapes or control
// characters.
func quoted(b []byte, p int) (text []byte, next int, ok bool) {
	if p+2 < len(b) && b[p+1] == '\'' && b[p+2] == '\'' {
		return nil, p, false // a long string
	}
	for q := p + 1; q < len(b); q++ {
		switch c := b[q]; {
		case c == '\'':
			return b[p+1 : q], q + 1, true
		case c == '\\' || c < 0x20:
			return nil, p, false
		}
	}
	return nil, p, false
}

// txtStruct reads the fields of a struct whose '{' is before b[p], at level.
func (r *Reader) txtStruct(b []byte, p, level int, rec *Record, depth int) (int, error) {
	if depth > maxDepth {
		return 0, ErrFallback
	}
	p = skipSpace(b, p)
	if p < len(b) && b[p] == '}' {
		return p + 1, nil
	}
	field := 0
	for {
		var name []byte
		var ok bool
		if p < len(b) && b[p] == '\'' {
			name, p, ok = quoted(b, p)
		} else {
			name, p, ok = ident(b, p)
		}
		if !ok {
			return 0, ErrFallback
		}
		p = skipSpace(b, p)
		if p+1 >= len(b) || b[p] != ':' || b[p+1] == ':' {
			return 0, ErrFallback
		}
		p = skipSpace(b, p+1)
		var err error
		if level >= 0 {
			slot := r.slotAt(level, field, name)
			field++
			switch {
			case slot < 0:
				if level == 0 && rec.Unknown == "" {
					rec.Unknown = string(name)
				}
				p, err = r.txtValue(b, p, nil, depth+1)
			case rec.Fields[level][slot].Type != ion.NoType:
				return 0, ErrFallback // a repeated field
			case r.nest(level, slot):
				p, err = r.txtNested(b, p, level, slot, rec, depth+1)
			default:
				q, ok := -1, false
				if level == 0 {
					q, ok = r.txtVarScale(b, p, &rec.Fields[level][slot])
				}
				if ok {
					p = q
				} else {
					p, err = r.txtValue(b, p, &rec.Fields[level][slot], depth+1)
				}
			}
		} else {
			p, err = r.txtValue(b, p, nil, depth+1)
		}
		if err != nil {
			return 0, err
		}
		p = skipSpace(b, p)
		if p >= len(b) {
			return 0, ErrFallback
		}
		switch b[p] {
		case '}':
			return p + 1, nil
		case ',':
			p = skipSpace(b, p+1)
			if p < len(b) && b[p] == '}' {
				return 0, ErrFallback // a trailing comma
			}
		default:
			return 0, ErrFallback
		}
	}
}

// slotAt returns the slot of the field name at position field of a struct
// at level (-1: not wanted). Records of a batch repeat their field order,
// so the name seen at that position last time is tried first.
func (r *Reader) slotAt(level, field int, name []byte) int {
	order := r.order[level]
	if field < len(order) && string(order[field].name) == string(name) {
		return order[field].slot
	}
	slot, ok := r.names[level][string(name)]
	if !ok {
		slot = -1
	}
	if field < maxOrder {
		for len(order) <= field {
			order = append(order, namedSlot{})
		}
		order[field] = namedSlot{name: append(order[field].name[:0], name...), slot: slot}
		r.order[level] = order
	}
	return slot
}

// maxOrder bounds the field positions slotAt remembers per level.
const maxOrder = 64

type namedSlot struct {
	name []byte
	slot int
}

// txtVarScale reads, at b[p], Debezium's {scale: int, value: blob} when it
// is exactly that, in either order and within bounds, into f.
func (r *Reader) txtVarScale(b []byte, p int, f *Scalar) (int, bool) {
	if p+1 >= len(b) || b[p] != '{' || b[p+1] == '{' {
		return 0, false
	}
	var scale, value Scalar
	p = skipSpace(b, p+1)
	for i := range 2 {
		name, q, ok := ident(b, p)
		if !ok {
			return 0, false
		}
		q = skipSpace(b, q)
		if q+1 >= len(b) || b[q] != ':' || b[q+1] == ':' {
			return 0, false
		}
		q = skipSpace(b, q+1)
		var err error
		switch string(name) {
		case "scale":
			if scale.Type != ion.NoType || q >= len(b) || !(b[q] == '-' || b[q] >= '0' && b[q] <= '9') {
				return 0, false
			}
			q, err = txtNumber(b, q, &scale)
			if err != nil || scale.Type != ion.IntType {
				return 0, false
			}
		case "value":
			if value.Type != ion.NoType || q+1 >= len(b) || b[q] != '{' || b[q+1] != '{' {
				return 0, false
			}
			q, err = r.txtBlob(b, q, &value)
			if err != nil {
				return 0, false
			}
		default:
			return 0, false
		}
		p = skipSpace(b, q)
		if i == 0 {
			if p >= len(b) || b[p] != ',' {
				return 0, false
			}
			p = skipSpace(b, p+1)
		}
	}
	if p >= len(b) || b[p] != '}' || scale.Mag > maxVarScale || len(value.Bytes) > maxVarScaleBytes {
		return 0, false
	}
	exp := -int32(scale.Mag)
	if scale.Neg {
		exp = -exp
	}
	*f = Scalar{Type: ion.StructType, VarScale: true, Exp: exp, Bytes: value.Bytes}
	return p + 1, true
}

// txtNested reads the value of a field that holds the next level: a struct
// is read field by field, anything else as a value.
func (r *Reader) txtNested(b []byte, p, level, slot int, rec *Record, depth int) (int, error) {
	q, err := skipAnnotations(b, p)
	if err != nil {
		return 0, err
	}
	if q < len(b) && b[q] == '{' && (q+1 >= len(b) || b[q+1] != '{') {
		rec.Fields[level][slot].Type = ion.StructType
		return r.txtStruct(b, q+1, level+1, rec, depth)
	}
	return r.txtValue(b, p, &rec.Fields[level][slot], depth)
}

// skipAnnotations steps over annotations (identifier::) at b[p]; ion-go's
// readers of these records ignore them.
func skipAnnotations(b []byte, p int) (int, error) {
	for p < len(b) && identStart(b[p]) {
		_, q, ok := ident(b, p)
		if !ok {
			return p, nil // a keyword or a $-symbol: the value reads it
		}
		if q+1 >= len(b) || b[q] != ':' || b[q+1] != ':' {
			return p, nil // a symbol value
		}
		if q+2 < len(b) && b[q+2] == ':' {
			return 0, ErrFallback
		}
		p = skipSpace(b, q+2)
	}
	return p, nil
}

// txtValue reads the value at b[p] into f; a container is checked through
// and reported by its type. With f nil, the value is only checked.
func (r *Reader) txtValue(b []byte, p int, f *Scalar, depth int) (int, error) {
	if f == nil {
		f = &r.scratch
	}
	if depth > maxDepth {
		return 0, ErrFallback
	}
	p, err := skipAnnotations(b, p)
	if err != nil || p >= len(b) {
		return 0, ErrFallback
	}
	switch c := b[p]; {
	case c == '"':
		return r.txtString(b, p, f)
	case c == '\'':
		text, q, ok := quoted(b, p)
		if !ok {
			return 0, ErrFallback
		}
		f.Type, f.Bytes = ion.SymbolType, text
		return q, nil
	case c == '{':
		if p+1 < len(b) && b[p+1] == '{' {
			return r.txtBlob(b, p, f)
		}
		f.Type = ion.StructType
		return r.txtStruct(b, p+1, -1, nil, depth+1)
	case c == '[':
		f.Type = ion.ListType
		return r.txtList(b, p+1, depth+1)
	case c >= '0' && c <= '9' || c == '-' || c == '+':
		return txtNumber(b, p, f)
	case identStart(c):
		q := p + 1
		for q < len(b) && identPart(b[q]) {
			q++
		}
		if !stop(b, q) {
			return 0, ErrFallback // null.type, an operator, ...
		}
		switch word := b[p:q]; string(word) {
		case "null":
			f.Type, f.Null = ion.NullType, true
		case "true", "false":
			f.Type, f.Bool = ion.BoolType, word[0] == 't'
		case "nan":
			f.Type, f.Float = ion.FloatType, math.NaN()
		default:
			if c == '$' {
				return 0, ErrFallback
			}
			f.Type, f.Bytes = ion.SymbolType, word
		}
		return q, nil
	}
	return 0, ErrFallback
}

// txtBlob reads a blob {{base64}} at b[p] written without whitespace;
// clobs and spaced-out blobs fall back.
func (r *Reader) txtBlob(b []byte, p int, f *Scalar) (int, error) {
	q := p + 2
	for q < len(b) && b[q] != '}' {
		c := b[q]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '=') {
			return 0, ErrFallback
		}
		q++
	}
	if q+1 >= len(b) || b[q+1] != '}' {
		return 0, ErrFallback
	}
	from := len(r.buf)
	out, err := base64.StdEncoding.AppendDecode(r.buf, b[p+2:q])
	if err != nil {
		return 0, ErrFallback
	}
	r.buf = out
	f.Type, f.Bytes = ion.BlobType, r.buf[from:len(r.buf):len(r.buf)]
	return q + 2, nil
}

// txtList checks the elements of a list whose '[' is before b[p].
func (r *Reader) txtList(b []byte, p, depth int) (int, error) {
	p = skipSpace(b, p)
	if p < len(b) && b[p] == ']' {
		return p + 1, nil
	}
	for {
		q, err := r.txtValue(b, p, nil, depth)
		if err != nil {
			return 0, err
		}
		p = skipSpace(b, q)
		if p >= len(b) {
			return 0, ErrFallback
		}
		switch b[p] {
		case ']':
			return p + 1, nil
		case ',':
			p = skipSpace(b, p+1)
			if p < len(b) && b[p] == ']' {
				return 0, ErrFallback
			}
		default:
			return 0, ErrFallback
		}
	}
}

// txtString reads the string at b[p]. Its bytes are taken as written, as
// ion-go's text reader takes them (UTF-8 is checked where the column
// needs it); escapes are decoded as ion-go decodes them, except the
// surrogate escapes ion-go gets wrong (see hexEscape).
func (r *Reader) txtString(b []byte, p int, f *Scalar) (int, error) {
	start := p + 1
	q := start
	for ; q < len(b); q++ {
		c := b[q]
		if c == '"' {
			f.Type, f.Bytes = ion.StringType, b[start:q]
			return q + 1, nil
		}
		if c == '\\' {
			break
		}
		if c < 0x20 && c != '\t' && c != 0x0B && c != 0x0C {
			return 0, ErrFallback
		}
	}
	// Escapes: unescape into the record's buffer.
	from := len(r.buf)
	r.buf = append(r.buf, b[start:q]...)
	for q < len(b) {
		c := b[q]
		switch {
		case c == '"':
			f.Type, f.Bytes = ion.StringType, r.buf[from:len(r.buf):len(r.buf)]
			return q + 1, nil
		case c == '\\':
			if q+1 >= len(b) {
				return 0, ErrFallback
			}
			e := b[q+1]
			q += 2
			var ch rune
			switch e {
			case '0':
				ch = 0
			case 'a':
				ch = '\a'
			case 'b':
				ch = '\b'
			case 't':
				ch = '\t'
			case 'n':
				ch = '\n'
			case 'f':
				ch = '\f'
			case 'r':
				ch = '\r'
			case 'v':
				ch = '\v'
			case '?', '/', '\'', '"', '\\':
				ch = rune(e)
			case 'x', 'u', 'U':
				var err error
				if ch, q, err = hexEscape(b, e, q); err != nil {
					return 0, err
				}
			default:
				return 0, ErrFallback
			}
			r.buf = utf8.AppendRune(r.buf, ch)
		case c < 0x20 && c != '\t' && c != 0x0B && c != 0x0C:
			return 0, ErrFallback
		default:
			r.buf = append(r.buf, c)
			q++
		}
	}
	return 0, ErrFallback
}

// hexEscape reads the digits of a \x, \u or \U escape (e) at b[q] and
// returns its character and the offset after it. A high surrogate followed
// by the \u escape of a low one is the character the pair encodes, as the
// Ion conformance suite reads it (ion-go reads two U+FFFD); other
// surrogates, and code points beyond U+10FFFF, name no character and fall
// back (ion-go reads each as U+FFFD; cdc reads them through ionesc, which
// refuses them).
func hexEscape(b []byte, e byte, q int) (rune, int, error) {
	n := 2
	switch e {
	case 'u':
		n = 4
	case 'U':
		n = 8
	}
	if q+n > len(b) {
		return 0, 0, ErrFallback
	}
	v, err := strconv.ParseUint(string(b[q:q+n]), 16, 32)
	switch {
	case err != nil, v > utf8.MaxRune, v >= 0xDC00 && v <= 0xDFFF, e != 'u' && utf16.IsSurrogate(rune(v)):
		return 0, 0, ErrFallback
	case v < 0xD800 || v > 0xDBFF:
		return rune(v), q + n, nil
	}
	q += n
	if q+6 > len(b) || b[q] != '\\' || b[q+1] != 'u' {
		return 0, 0, ErrFallback
	}
	lo, err := strconv.ParseUint(string(b[q+2:q+6]), 16, 32)
	if err != nil || lo < 0xDC00 || lo > 0xDFFF {
		return 0, 0, ErrFallback
	}
	return utf16.DecodeRune(rune(v), rune(lo)), q + 6, nil
}

// txtNumber reads an int, decimal, float or timestamp at b[p].
func txtNumber(b []byte, p int, f *Scalar) (int, error) {
	start := p
	if b[p] == '+' || b[p] == '-' {
		if p+4 <= len(b) && string(b[p+1:p+4]) == "inf" && stop(b, p+4) {
			sign := 1
			if b[p] == '-' {
				sign = -1
			}
			f.Type, f.Float = ion.FloatType, math.Inf(sign)
			return p + 4, nil
		}
		if b[p] == '+' {
			return 0, ErrFallback
		}
		p++
	}
	if p >= len(b) || b[p] < '0' || b[p] > '9' {
		return 0, ErrFallback
	}
	if start == p && p+4 < len(b) && digits(b[p:p+4]) && (b[p+4] == '-' || b[p+4] == 'T') {
		return txtTimestamp(b, p, f)
	}
	neg := start != p
	intStart := p
	for p < len(b) && b[p] >= '0' && b[p] <= '9' {
		p++
	}
	if b[intStart] == '0' && p-intStart > 1 {
		return 0, ErrFallback // leading zeros, refused by ion-go
	}
	intEnd := p
	frac := -1
	if p < len(b) && b[p] == '.' {
		p++
		frac = p
		for p < len(b) && b[p] >= '0' && b[p] <= '9' {
			p++
		}
	}
	fracEnd := p
	typ := ion.IntType
	if frac >= 0 {
		typ = ion.DecimalType
	}
	exp := 0
	if p < len(b) && (b[p] == 'e' || b[p] == 'E' || b[p] == 'd' || b[p] == 'D') {
		if b[p] == 'e' || b[p] == 'E' {
			typ = ion.FloatType
		} else {
			typ = ion.DecimalType
		}
		p++
		eneg := false
		if p < len(b) && (b[p] == '+' || b[p] == '-') {
			eneg = b[p] == '-'
			p++
		}
		es := p
		for p < len(b) && b[p] >= '0' && b[p] <= '9' {
			p++
		}
		if p == es || p-es > 4 {
			return 0, ErrFallback
		}
		exp, _ = strconv.Atoi(string(b[es:p]))
		if eneg {
			exp = -exp
		}
	}
	if !stop(b, p) {
		return 0, ErrFallback
	}
	switch typ {
	case ion.FloatType:
		v, err := strconv.ParseFloat(string(b[start:p]), 64)
		if err != nil {
			if ne, ok := err.(*strconv.NumError); !ok || ne.Err != strconv.ErrRange {
				return 0, ErrFallback
			}
		}
		f.Type, f.Float = ion.FloatType, v
	case ion.IntType:
		m, ok := decimalDigits(0, b[intStart:intEnd])
		if !ok {
			return 0, ErrFallback
		}
		f.Type, f.Mag, f.Neg = ion.IntType, m, neg && m != 0
	default:
		m, ok := decimalDigits(0, b[intStart:intEnd])
		if ok && frac >= 0 {
			m, ok = decimalDigits(m, b[frac:fracEnd])
		}
		if !ok {
			return 0, ErrFallback
		}
		if frac >= 0 {
			exp -= fracEnd - frac
		}
		f.Type, f.Mag, f.Neg, f.Exp, f.NegZero = ion.DecimalType, m, neg, int32(exp), neg && m == 0
	}
	return p, nil
}

// decimalDigits appends decimal digits to m, refusing overflow of uint64.
func decimalDigits(m uint64, d []byte) (uint64, bool) {
	if m == 0 && len(d) <= 19 { // cannot overflow
		for _, c := range d {
			m = m*10 + uint64(c-'0')
		}
		return m, true
	}
	for _, c := range d {
		if m > (math.MaxUint64-9)/10 {
			return 0, false
		}
		m = m*10 + uint64(c-'0')
	}
	return m, true
}

func digits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func num(b []byte) int {
	n := 0
	for _, c := range b {
		n = n*10 + int(c-'0')
	}
	return n
}

// txtTimestamp reads the forms YYYY-MM-DD, YYYY-MM-DDThh:mm±, ...:ss± and
// ...:ss.f± with 1 to 8 fraction digits (± is Z or an offset ±hh:mm); other
// forms, which ion-go reads through other paths, fall back.
func txtTimestamp(b []byte, p int, f *Scalar) (int, error) {
	at := func(i int, c byte) bool { return p+i < len(b) && b[p+i] == c }
	dig := func(i, n int) bool { return p+i+n <= len(b) && digits(b[p+i:p+i+n]) }
	if !(at(4, '-') && dig(5, 2) && at(7, '-') && dig(8, 2)) {
		return 0, ErrFallback
	}
	y, mo, d := num(b[p:p+4]), num(b[p+5:p+7]), num(b[p+8:p+10])
	if y < 1 || mo < 1 || mo > 12 || d < 1 || d > daysIn(y, mo) {
		return 0, ErrFallback
	}
	if stop(b, p+10) || (at(10, 'T') && stop(b, p+11)) {
		end := p + 10
		if at(10, 'T') {
			end++
		}
		f.Type, f.Sec, f.Nsec, f.Prec = ion.TimestampType, time.Date(y, time.Month(mo), d, 0, 0, 0, 0, time.UTC).Unix(), 0, ion.TimestampPrecisionDay
		return end, nil
	}
	if !(at(10, 'T') && dig(11, 2) && at(13, ':') && dig(14, 2)) {
		return 0, ErrFallback
	}
	h, mi, s, ns := num(b[p+11:p+13]), num(b[p+14:p+16]), 0, 0
	prec := ion.TimestampPrecisionMinute
	i := 16
	if at(i, ':') {
		if !dig(17, 2) {
			return 0, ErrFallback
		}
		s, i, prec = num(b[p+17:p+19]), 19, ion.TimestampPrecisionSecond
		if at(i, '.') {
			j := i + 1
			for p+j < len(b) && b[p+j] >= '0' && b[p+j] <= '9' {
				j++
			}
			n := j - i - 1
			if n < 1 || n > 8 {
				return 0, ErrFallback
			}
			ns = num(b[p+i+1 : p+j])
			for range 9 - n {
				ns *= 10
			}
			i, prec = j, ion.TimestampPrecisionNanosecond
		}
	}
	if h > 23 || mi > 59 || s > 59 {
		return 0, ErrFallback
	}
	off := 0
	switch {
	case at(i, 'Z'):
		i++
	case (at(i, '+') || at(i, '-')) && dig(i+1, 2) && at(i+3, ':') && dig(i+4, 2):
		oh, om := num(b[p+i+1:p+i+3]), num(b[p+i+4:p+i+6])
		if oh > 23 || om > 59 {
			return 0, ErrFallback
		}
		off = oh*60 + om
		if b[p+i] == '-' {
			off = -off
		}
		i += 6
	default:
		return 0, ErrFallback
	}
	if !stop(b, p+i) {
		return 0, ErrFallback
	}
	sec := time.Date(y, time.Month(mo), d, h, mi, s, 0, time.UTC).Unix() - int64(off)*60
	f.Type, f.Sec, f.Nsec, f.Prec = ion.TimestampType, sec, int32(ns), prec
	return p + i, nil
}
