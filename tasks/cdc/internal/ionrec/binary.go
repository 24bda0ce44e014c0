package ionrec

import (
	"bytes"
	"math"
	"time"
	"unicode/utf8"

	"github.com/amazon-ion/ion-go/ion"
)

// ivm is the binary Ion version marker.
var ivm = []byte{0xE0, 0x01, 0x00, 0xEA}

// systemSymbols are Ion 1.0's system symbol table, SIDs 1..9.
var systemSymbols = []string{"$ion", "$ion_1_0", "$ion_symbol_table", "name", "version", "imports", "symbols", "max_id", "$ion_shared_symbol_table"}

const (
	sidSymbolTable = 3
	sidSymbols     = 7
	// maxTables bounds the cache of local symbol tables; Kestra's records
	// use a handful (one per set of non-NULL columns).
	maxTables = 64
)

// symtab is a symbol table in force: the text of each SID and the slot each
// SID names at each level of the Shape (-1: not wanted).
type symtab struct {
	text  [][]byte // nil at SID 0
	slots [3][]int16
}

func (r *Reader) newSymtab(local [][]byte) *symtab {
	st := &symtab{text: make([][]byte, 1, 1+len(systemSymbols)+len(local))}
	for _, s := range systemSymbols {
		st.text = append(st.text, []byte(s))
	}
	st.text = append(st.text, local...)
	for l := range st.slots {
		st.slots[l] = make([]int16, len(st.text))
		for sid, t := range st.text {
			st.slots[l][sid] = -1
			if i, ok := r.names[l][string(t)]; ok && t != nil {
				st.slots[l][sid] = int16(i)
			}
		}
	}
	return st
}

func (r *Reader) systemTable() *symtab { return r.newSymtab(nil) }

// NextChunk returns the length of the run at the start of data that ends
// before the next top-level version marker (or at the end of data). data
// must be framed binary Ion starting at a top-level value.
func NextChunk(data []byte) int {
	p := 0
	for p < len(data) {
		if p > 0 && bytes.HasPrefix(data[p:], ivm) {
			return p
		}
		if bytes.HasPrefix(data[p:], ivm) {
			p += 4
			continue
		}
		_, _, _, end, ok := header(data, p, len(data))
		if !ok {
			return len(data)
		}
		p = end
	}
	return len(data)
}

// Binary reads the records of chunk: binary Ion that starts with a version
// marker and holds, at top level, local symbol tables and structs (one
// record each) and no other version marker. It calls yield with each
// record in order; rec is valid until yield returns. It returns ErrFallback
// as soon as chunk holds anything else, having yielded the records before;
// an error from yield is returned as it is.
func (r *Reader) Binary(chunk []byte, rec *Record, yield func(*Record) error) error {
	if !bytes.HasPrefix(chunk, ivm) {
		return ErrFallback
	}
	r.table = r.tableFor(nil)
	for p := 4; p < len(chunk); {
		t, l, start, end, ok := header(chunk, p, len(chunk))
		switch {
		case !ok:
			return ErrFallback
		case t == 0xE:
			if err := r.symbolTable(chunk[p:end], start-p); err != nil {
				return err
			}
		case t == 0xD && l != 0xF && l != 1:
			rec.Reset()
			r.buf = r.buf[:0]
			if err := r.binStruct(chunk, start, end, 0, rec, 0); err != nil {
				return err
			}
			if err := yield(rec); err != nil {
				return err
			}
		default:
			return ErrFallback
		}
		p = end
	}
	return nil
}

// tableFor returns the cached table of the local symbol table lst (nil: the
// system table).
func (r *Reader) tableFor(lst []byte) *symtab {
	st := r.tables[string(lst)]
	if st == nil && lst == nil {
		st = r.systemTable()
		r.tables[""] = st
	}
	return st
}

// symbolTable installs the local symbol table lst, a top-level annotation
// wrapper whose content starts at lst[start]: $ion_symbol_table::{symbols:
// [...]} and nothing else (no imports: a version marker before each record
// leaves nothing to import).
func (r *Reader) symbolTable(lst []byte, start int) error {
	if r.last != nil && string(lst) == string(r.lastLST) {
		r.table = r.last
		return nil
	}
	if st := r.tableFor(lst); st != nil {
		r.table, r.last, r.lastLST = st, st, append(r.lastLST[:0], lst...)
		return nil
	}
	n, p, ok := varUint(lst, start, len(lst))
	if !ok || n != 1 || p >= len(lst) || lst[p] != 0x80|sidSymbolTable {
		return ErrFallback
	}
	p++
	t, l, s, e, ok := header(lst, p, len(lst))
	if !ok || t != 0xD || l == 0xF || l == 1 || e != len(lst) {
		return ErrFallback
	}
	var local [][]byte
	seen := false
	for q := s; q < e; {
		sid, q2, ok := varUint(lst, q, e)
		if !ok || sid != sidSymbols || seen || q2 >= e {
			return ErrFallback
		}
		seen = true
		lt, ll, ls, le, ok := header(lst, q2, e)
		if !ok || lt != 0xB || ll == 0xF {
			return ErrFallback
		}
		for v := ls; v < le; {
			st, sl, ss, se, ok := header(lst, v, le)
			if !ok || st != 0x8 || sl == 0xF || !utf8.Valid(lst[ss:se]) {
				return ErrFallback
			}
			local = append(local, lst[ss:se])
			v = se
		}
		q = le
	}
	if len(r.tables) >= maxTables {
		clear(r.tables)
	}
	for i := range local { // own the text: lst is the caller's buffer
		local[i] = append([]byte(nil), local[i]...)
	}
	st := r.newSymtab(local)
	r.tables[string(lst)] = st
	r.table, r.last, r.lastLST = st, st, append(r.lastLST[:0], lst...)
	return nil
}

// header reads the type descriptor at b[p] of a value that must end by lim:
// its type t, low nibble l, and content b[start:end].
func header(b []byte, p, lim int) (t, l byte, start, end int, ok bool) {
	if p >= lim {
		return 0, 0, 0, 0, false
	}
	c := b[p]
	t, l = c>>4, c&0x0F
	p++
	n := int(l)
	switch {
	case l == 0x0F, t == 0x1:
		n = 0
	case l == 0x0E || (t == 0xD && l == 1):
		v, q, ok := varUint(b, p, lim)
		if !ok {
			return 0, 0, 0, 0, false
		}
		n, p = v, q
	}
	if n > lim-p {
		return 0, 0, 0, 0, false
	}
	return t, l, p, p + n, true
}

// varUint reads a VarUInt (padded ones included) that fits an int32.
func varUint(b []byte, p, lim int) (int, int, bool) {
	var v int
	for i := p; i < lim && i < p+8; i++ {
		v = v<<7 | int(b[i]&0x7F)
		if v > math.MaxInt32 {
			return 0, 0, false
		}
		if b[i]&0x80 != 0 {
			return v, i + 1, true
		}
	}
	return 0, 0, false
}

// varInt reads a VarInt of at most 4 bytes; neg reports its sign bit.
func varInt(b []byte, p, lim int) (v int, neg bool, next int, ok bool) {
	if p >= lim {
		return 0, false, 0, false
	}
	c := b[p]
	neg = c&0x40 != 0
	v = int(c & 0x3F)
	for i := p; ; {
		if b[i]&0x80 != 0 {
			if neg {
				v = -v
			}
			return v, neg, i + 1, true
		}
		i++
		if i >= lim || i >= p+4 {
			return 0, false, 0, false
		}
		v = v<<7 | int(b[i]&0x7F)
	}
}

// magnitude reads a big-endian unsigned int of at most 8 bytes.
func magnitude(b []byte) (uint64, bool) {
	if len(b) > 8 {
		return 0, false
	}
	var m uint64
	for _, c := range b {
		m = m<<8 | uint64(c)
	}
	return m, true
}

// binStruct reads the fields of the struct b[p:end] at level.
func (r *Reader) binStruct(b []byte, p, end, level int, rec *Record, depth int) error {
	if depth > maxDepth {
		return ErrFallback
	}
	for p < end {
		sid, q, ok := varUint(b, p, end)
		if !ok || sid >= len(r.table.text) || r.table.text[sid] == nil {
			return ErrFallback
		}
		t, l, s, e, ok := r.binValue(b, q, end)
		if !ok {
			return ErrFallback
		}
		slot := int(r.table.slots[level][sid])
		switch {
		case slot < 0:
			if level == 0 && rec.Unknown == "" {
				rec.Unknown = string(r.table.text[sid])
			}
			if err := r.binScalar(b, t, l, s, e, &r.scratch, depth+1); err != nil {
				return err
			}
		case rec.Fields[level][slot].Type != ion.NoType:
			return ErrFallback // a repeated field
		case r.nest(level, slot) && t == 0xD && l != 0x0F:
			rec.Fields[level][slot].Type = ion.StructType
			if err := r.binStruct(b, s, e, level+1, rec, depth+1); err != nil {
				return err
			}
		case level == 0 && t == 0xD && l != 0x0F && l != 1 && r.binVarScale(b, s, e, &rec.Fields[level][slot]):
		default:
			if err := r.binScalar(b, t, l, s, e, &rec.Fields[level][slot], depth+1); err != nil {
				return err
			}
		}
		p = e
	}
	return nil
}

// binVarScale reads the struct b[s:e] into f when it is exactly Debezium's
// {scale: int, value: blob}, in either order, within bounds.
func (r *Reader) binVarScale(b []byte, s, e int, f *Scalar) bool {
	var scale Scalar
	var value []byte
	seenScale, seenValue := false, false
	for p := s; p < e; {
		sid, q, ok := varUint(b, p, e)
		if !ok || sid >= len(r.table.text) {
			return false
		}
		t, l, vs, ve, ok := header(b, q, e)
		if !ok || l == 0x0F {
			return false
		}
		switch string(r.table.text[sid]) {
		case "scale":
			if seenScale || (t != 0x2 && t != 0x3) || r.binScalar(b, t, l, vs, ve, &scale, 0) != nil {
				return false
			}
			seenScale = true
		case "value":
			if seenValue || t != 0xA || ve-vs > maxVarScaleBytes {
				return false
			}
			seenValue, value = true, b[vs:ve]
		default:
			return false
		}
		p = ve
	}
	if !seenScale || !seenValue || scale.Mag > maxVarScale {
		return false
	}
	exp := -int32(scale.Mag)
	if scale.Neg {
		exp = -exp
	}
	*f = Scalar{Type: ion.StructType, VarScale: true, Exp: exp, Bytes: value}
	return true
}

// binValue reads the header of the value at b[p] inside a container ending
// at lim, stepping over an annotation wrapper (annotations are ignored, as
// ion-go's readers of these records ignore them).
func (r *Reader) binValue(b []byte, p, lim int) (t, l byte, start, end int, ok bool) {
	t, l, start, end, ok = header(b, p, lim)
	if !ok || t != 0xE {
		return t, l, start, end, ok && (t != 0 || l == 0x0F) && t != 0xF
	}
	if l < 3 || l == 0x0F {
		return 0, 0, 0, 0, false
	}
	n, q, ok := varUint(b, start, end)
	if !ok || n == 0 || q+n >= end {
		return 0, 0, 0, 0, false
	}
	for a := q; a < q+n; {
		sid, a2, ok := varUint(b, a, q+n)
		if !ok || sid >= len(r.table.text) {
			return 0, 0, 0, 0, false
		}
		a = a2
	}
	wt, wl, ws, we, ok := header(b, q+n, end)
	if !ok || we != end || wt == 0xE || wt == 0xF || (wt == 0 && wl != 0x0F) || (wt == 0xD && wl == 1) {
		return 0, 0, 0, 0, false
	}
	return wt, wl, ws, we, true
}

// binScalar reads the value of type t (low nibble l, content b[s:e]) into f;
// a container is checked through and reported by its type.
func (r *Reader) binScalar(b []byte, t, l byte, s, e int, f *Scalar, depth int) error {
	if l == 0x0F {
		if t == 0 {
			f.Type, f.Null = ion.NullType, true
			return nil
		}
		if t == 0xE {
			return ErrFallback
		}
		f.Type, f.Null = binTypes[t], true
		return nil
	}
	c := b[s:e]
	switch t {
	case 0x1:
		if l > 1 {
			return ErrFallback
		}
		f.Type, f.Bool = ion.BoolType, l == 1
	case 0x2, 0x3:
		m, ok := magnitude(c)
		if !ok || (t == 0x3 && m == 0) {
			return ErrFallback
		}
		f.Type, f.Mag, f.Neg = ion.IntType, m, t == 0x3
	case 0x4:
		f.Type = ion.FloatType
		switch len(c) {
		case 0:
			f.Float = 0
		case 4:
			f.Float = float64(math.Float32frombits(uint32(c[0])<<24 | uint32(c[1])<<16 | uint32(c[2])<<8 | uint32(c[3])))
		case 8:
			m, _ := magnitude(c)
			f.Float = math.Float64frombits(m)
		default:
			return ErrFallback
		}
	case 0x5:
		f.Type = ion.DecimalType
		if len(c) == 0 {
			return nil
		}
		exp, _, q, ok := varInt(c, 0, len(c))
		if !ok {
			return ErrFallback
		}
		f.Exp = int32(exp)
		if q < len(c) {
			neg := c[q]&0x80 != 0
			hi := c[q] & 0x7F
			m, ok := magnitude(c[q+1:])
			if !ok || len(c)-q > 8 || (m == 0 && hi == 0) {
				return ErrFallback // beyond 63 bits, or a zero coefficient written out
			}
			f.Mag, f.Neg = uint64(hi)<<(8*uint(len(c)-q-1))|m, neg
			f.NegZero = false
		}
	case 0x6:
		tm, prec, ok := binTimestamp(c)
		if !ok {
			return ErrFallback
		}
		f.Type, f.Sec, f.Nsec, f.Prec = ion.TimestampType, tm.Unix(), int32(tm.Nanosecond()), prec
	case 0x7:
		sid, ok := magnitude(c)
		if !ok || sid == 0 || sid >= uint64(len(r.table.text)) || r.table.text[sid] == nil {
			return ErrFallback
		}
		f.Type, f.Bytes = ion.SymbolType, r.table.text[sid]
	case 0x8:
		if !utf8.Valid(c) {
			return ErrFallback
		}
		f.Type, f.Bytes = ion.StringType, c
	case 0x9:
		f.Type, f.Bytes = ion.ClobType, c
	case 0xA:
		f.Type, f.Bytes = ion.BlobType, c
	case 0xB, 0xC:
		f.Type = binTypes[t]
		return r.binElements(b, s, e, false, depth)
	case 0xD:
		if l == 1 {
			return ErrFallback
		}
		f.Type = ion.StructType
		return r.binElements(b, s, e, true, depth)
	default:
		return ErrFallback
	}
	return nil
}

// binElements checks through the values of a container's content b[s:e]
// (a list's or sexp's, or with fields a struct's, whose values each follow
// a field name's symbol id).
func (r *Reader) binElements(b []byte, s, e int, fields bool, depth int) error {
	if depth > maxDepth {
		return ErrFallback
	}
	for p := s; p < e; {
		if fields {
			sid, q, ok := varUint(b, p, e)
			if !ok || sid >= len(r.table.text) || r.table.text[sid] == nil {
				return ErrFallback
			}
			p = q
		}
		vt, vl, vs, ve, ok := r.binValue(b, p, e)
		if !ok {
			return ErrFallback
		}
		if err := r.binScalar(b, vt, vl, vs, ve, &r.scratch, depth+1); err != nil {
			return err
		}
		p = ve
	}
	return nil
}

var binTypes = [16]ion.Type{ion.NullType, ion.BoolType, ion.IntType, ion.IntType, ion.FloatType, ion.DecimalType,
	ion.TimestampType, ion.SymbolType, ion.StringType, ion.ClobType, ion.BlobType, ion.ListType, ion.SexpType, ion.StructType}

// binTimestamp reads a binary timestamp's content: an offset, the UTC
// fields the precision has, and a fraction of 1 to 9 digits read exactly.
func binTimestamp(c []byte) (time.Time, ion.TimestampPrecision, bool) {
	off, _, p, ok := varInt(c, 0, len(c))
	if !ok || off <= -24*60 || off >= 24*60 {
		return time.Time{}, 0, false
	}
	f := [6]int{0, 1, 1, 0, 0, 0}
	prec := ion.TimestampNoPrecision
	for i := 0; i < 6 && p < len(c); i++ {
		v, q, ok := varUint(c, p, len(c))
		if !ok {
			return time.Time{}, 0, false
		}
		f[i], p = v, q
		if i == 3 {
			if p >= len(c) {
				return time.Time{}, 0, false // an hour without minutes
			}
			continue
		}
		prec++
	}
	if prec < ion.TimestampPrecisionYear || f[0] < 1 || f[0] > 9999 || f[1] < 1 || f[1] > 12 ||
		f[2] < 1 || f[2] > daysIn(f[0], f[1]) || f[3] > 23 || f[4] > 59 || f[5] > 59 {
		return time.Time{}, 0, false
	}
	if prec <= ion.TimestampPrecisionDay {
		return time.Date(f[0], time.Month(f[1]), f[2], 0, 0, 0, 0, time.UTC), prec, true
	}
	ns := 0
	if p < len(c) {
		exp, _, q, ok := varInt(c, p, len(c))
		if !ok || exp < -9 || exp > 0 {
			return time.Time{}, 0, false
		}
		var m uint64
		if q < len(c) {
			if c[q]&0x80 != 0 {
				return time.Time{}, 0, false
			}
			m, ok = magnitude(c[q:])
			if !ok {
				return time.Time{}, 0, false
			}
		}
		scale := uint64(1)
		for range -exp {
			scale *= 10
		}
		if m >= scale || (exp == 0 && q < len(c)) {
			return time.Time{}, 0, false
		}
		if exp < 0 {
			prec = ion.TimestampPrecisionNanosecond
			ns = int(m) * int(1_000_000_000/scale)
		}
	}
	return time.Date(f[0], time.Month(f[1]), f[2], f[3], f[4], f[5], ns, time.UTC), prec, true
}

func daysIn(y, m int) int {
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
