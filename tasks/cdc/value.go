package cdc

import (
	"encoding/binary"
	"hash/maphash"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/changesink/changesink/tasks/cdc/internal/pyjson"
)

// value is one canonical column value: the form the batch, the target read
// and the read-back are compared in. Its meaning depends on the column's
// kind (see kind); null is set only in Nullable columns.
type value struct {
	n    uint64
	s    string
	null bool
	// toast marks Debezium's placeholder for an unchanged TOASTed value of
	// an update: the value is the one the row held before, not yet known.
	toast bool
	// filled marks a value taken from the row's previous version because
	// the event carried the placeholder (keepUnchanged, fillFromTarget).
	filled bool
}

// equal compares two values; how a value was learnt (filled) does not count.
func (v value) equal(o value) bool {
	return v.null == o.null && v.n == o.n && v.s == o.s && v.toast == o.toast
}

// canonicalNaN is the one NaN bit pattern values carry, so that a NaN
// compares equal to itself when payloads are compared (Python's == says
// NaN != NaN, which would turn a replay of a NaN row into a conflict).
var canonicalNaN = math.Float64bits(math.NaN())

func floatValue(f float64) value {
	if math.IsNaN(f) {
		return value{n: canonicalNaN}
	}
	return value{n: math.Float64bits(f)}
}

// row is one captured change, canonical: the latest event of a key, the
// target's current row, or the read-back.
type row struct {
	key     string // canonical key bytes (encodeKey)
	lsn     uint64 // the version (_cdc_lsn): the commit-order position, order.go; the source LSN or just above it
	deleted bool
	// vals holds one value per mapped column, in mapping order. A delete
	// fresh from the decoder holds its before image there (change.image)
	// until the batch merges it; merged, it holds the seed's zeros.
	vals   []value
	rec    int64  // 1-based record number in the batch; 0 for rows read from ClickHouse
	change change // what the event said of its place in the history; zero for rows read from ClickHouse
	// unchanged: some value is still Debezium's placeholder (value.toast),
	// to be taken from the row's previous version.
	unchanged bool
}

// change is what an event says about its place in the source's history:
// the operation, the transaction, its LSN and the commit floor (order.go).
// samePayload ignores it. It holds no pointer but interned strings: rows
// are copied by value through the decode.
type change struct {
	operation  string // metadata.operation (interned); "" when absent or not text
	txID       int64  // metadata.source.txId, when txIDSet
	txIDSet    bool
	deletedSet bool   // the event carried the delete marker (absent reads as false)
	commitSet  bool   // commit is set: the sequence's lsn_commit
	sequenced  bool   // the event carried Debezium's metadata.source.sequence
	floorSet   bool   // floor is set
	image      bool   // a delete's vals hold a before image that tells rows apart
	lsn        uint64 // metadata.source.lsn
	commit     uint64 // lsn_commit, the first element of metadata.source.sequence
	// floor is the commit floor the version was raised to: commit, or the
	// snapshot LSN for the first transaction after a snapshot.
	floor uint64
	// sum is the event's hash (eventSum), folded into the batch's digest.
	sum uint64
}

// samePayload reports whether two rows are the same version: the seed
// compares the whole row dict, LSN and delete flag included.
func samePayload(a, b *row) bool {
	if a.lsn != b.lsn || a.deleted != b.deleted || len(a.vals) != len(b.vals) {
		return false
	}
	for i := range a.vals {
		if !a.vals[i].equal(b.vals[i]) {
			return false
		}
	}
	return true
}

// hashRow hashes the payload (for equal-LSN checks against versions that
// are no longer held in full).
func hashRow(seed maphash.Seed, r *row) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	var b [9]byte
	binary.LittleEndian.PutUint64(b[:8], r.lsn)
	if r.deleted {
		b[8] = 1
	}
	h.Write(b[:])
	for _, v := range r.vals {
		binary.LittleEndian.PutUint64(b[:8], v.n)
		b[8] = 0
		if v.null {
			b[8] = 1
		}
		if v.toast {
			b[8] |= 2
		}
		h.Write(b[:])
		binary.LittleEndian.PutUint64(b[:8], uint64(len(v.s)))
		h.Write(b[:8])
		h.WriteString(v.s)
	}
	return h.Sum64()
}

// encodeKey appends the canonical bytes of the key values: 8 bytes per
// fixed-width value, a length-prefixed string otherwise.
func encodeKey(dst []byte, m *Mapping, vals []value) []byte {
	for _, i := range m.keyIdx {
		v := vals[i]
		switch m.cols[i].typ.kind {
		case kindString, kindDecimal, kindUUID:
			dst = binary.AppendUvarint(dst, uint64(len(v.s)))
			dst = append(dst, v.s...)
		default:
			dst = binary.BigEndian.AppendUint64(dst, v.n)
		}
	}
	return dst
}

// compareKeys orders rows by key the way the seed's sorted() orders ids:
// numbers numerically, strings by code point (= byte order), column by column.
func compareKeys(m *Mapping, a, b *row) int {
	for _, i := range m.keyIdx {
		if c := compareValue(m.cols[i].typ, a.vals[i], b.vals[i]); c != 0 {
			return c
		}
	}
	return 0
}

func compareValue(t colType, a, b value) int {
	switch t.kind {
	case kindInt, kindDate, kindDateTime, kindDateTime64:
		return cmpOrdered(int64(a.n), int64(b.n))
	case kindUint, kindBool:
		return cmpOrdered(a.n, b.n)
	case kindDecimal:
		x, _ := new(big.Int).SetString(a.s, 10)
		y, _ := new(big.Int).SetString(b.s, 10)
		if x == nil || y == nil {
			return strings.Compare(a.s, b.s)
		}
		return x.Cmp(y)
	default:
		return strings.Compare(a.s, b.s)
	}
}

func cmpOrdered[T int64 | uint64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// renderKey renders a row's key for messages: "id=42" or "a=1, b=x".
func renderKey(m *Mapping, vals []value) string {
	var b []byte
	for n, i := range m.keyIdx {
		if n > 0 {
			b = append(b, ", "...)
		}
		b = append(b, m.cols[i].name...)
		b = append(b, '=')
		b = appendJSONValue(b, m.cols[i].typ, vals[i])
	}
	return string(b)
}

// appendJSONRow appends the row as the seed's json.dumps(row,
// ensure_ascii=False) writes it: the mapped columns in mapping order, then
// the version and deleted columns; separators ", " and ": ".
func appendJSONRow(dst []byte, m *Mapping, r *row) []byte {
	dst = append(dst, '{')
	for i := range m.cols {
		dst = pyjson.AppendString(dst, m.cols[i].name)
		dst = append(dst, ": "...)
		dst = appendJSONValue(dst, m.cols[i].typ, r.vals[i])
		dst = append(dst, ", "...)
	}
	dst = pyjson.AppendString(dst, m.Target.VersionColumn)
	dst = append(dst, ": "...)
	dst = strconv.AppendUint(dst, r.lsn, 10)
	dst = append(dst, ", "...)
	dst = pyjson.AppendString(dst, m.Target.DeletedColumn)
	if r.deleted {
		dst = append(dst, ": 1}"...)
	} else {
		dst = append(dst, ": 0}"...)
	}
	return dst
}

// appendJSONValue renders one value: integers as numbers, floats as
// Python's repr (NaN, Infinity), decimals as numbers with the column's scale
// (12.50), strings as JSON strings, Bool as true/false, Date as
// "2024-01-15", DateTime/DateTime64 as RFC 3339 in UTC with the column's
// precision, UUID as its canonical string, null as null, and an unchanged
// TOAST value that was not learnt (its key is newer in the target, so the
// row is skipped) as the placeholder the batch holds.
func appendJSONValue(dst []byte, t colType, v value) []byte {
	if v.toast { // only in a key the target holds newer: never written
		return pyjson.AppendString(dst, toastPlaceholder)
	}
	if v.null {
		return append(dst, "null"...)
	}
	switch t.kind {
	case kindInt:
		return strconv.AppendInt(dst, int64(v.n), 10)
	case kindUint:
		return strconv.AppendUint(dst, v.n, 10)
	case kindFloat32, kindFloat64:
		return pyjson.AppendFloat(dst, math.Float64frombits(v.n))
	case kindDecimal:
		return appendDecimal(dst, v.s, t.scale)
	case kindString:
		return pyjson.AppendString(dst, v.s)
	case kindBool:
		if v.n != 0 {
			return append(dst, "true"...)
		}
		return append(dst, "false"...)
	case kindDate:
		dst = append(dst, '"')
		dst = time.Unix(int64(v.n)*86400, 0).UTC().AppendFormat(dst, "2006-01-02")
		return append(dst, '"')
	case kindDateTime:
		dst = append(dst, '"')
		dst = time.Unix(int64(v.n), 0).UTC().AppendFormat(dst, "2006-01-02T15:04:05Z")
		return append(dst, '"')
	case kindDateTime64:
		dst = append(dst, '"')
		dst = appendTicks(dst, int64(v.n), t)
		return append(dst, '"')
	case kindUUID:
		var u uuid.UUID
		copy(u[:], v.s)
		dst = append(dst, '"')
		dst = append(dst, u.String()...)
		return append(dst, '"')
	}
	return append(dst, "null"...)
}

// ticksTime converts DateTime64 ticks to a time.Time in UTC.
func ticksTime(ticks int64, t colType) time.Time {
	per := t.ticksPerSecond()
	sec, frac := ticks/per, ticks%per
	if frac < 0 {
		sec--
		frac += per
	}
	return time.Unix(sec, frac*(1_000_000_000/per)).UTC()
}

func appendTicks(dst []byte, ticks int64, t colType) []byte {
	tm := ticksTime(ticks, t)
	dst = tm.AppendFormat(dst, "2006-01-02T15:04:05")
	if t.prec > 0 {
		per := t.ticksPerSecond()
		frac := ticks % per
		if frac < 0 {
			frac += per
		}
		s := strconv.FormatInt(frac, 10)
		dst = append(dst, '.')
		for range t.prec - len(s) {
			dst = append(dst, '0')
		}
		dst = append(dst, s...)
	}
	return append(dst, 'Z')
}

// appendDecimal renders an unscaled integer text at scale as a decimal number.
func appendDecimal(dst []byte, unscaled string, scale int) []byte {
	neg := strings.HasPrefix(unscaled, "-")
	digits := strings.TrimPrefix(unscaled, "-")
	if neg {
		dst = append(dst, '-')
	}
	if scale == 0 {
		return append(dst, digits...)
	}
	for len(digits) <= scale {
		digits = "0" + digits
	}
	dst = append(dst, digits[:len(digits)-scale]...)
	dst = append(dst, '.')
	return append(dst, digits[len(digits)-scale:]...)
}
