package change

import (
	"encoding/binary"
	"hash/maphash"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/changesink/changesink/tasks/cdc/mapping"

	"github.com/google/uuid"

	"github.com/changesink/changesink/tasks/cdc/internal/pyjson"
)

// Value is one canonical column value: the form the batch, the target read
// and the read-back are compared in. Its meaning depends on the column's
// kind (see kind); null is set only in Nullable columns.
type Value struct {
	N    uint64
	S    string
	Null bool
	// Toast marks Debezium's placeholder for an unchanged TOASTed value of
	// an update: the value is the one the row held before, not yet known.
	Toast bool
	// Filled marks a value taken from the row's previous version because
	// the event carried the placeholder (keepUnchanged, fillFromTarget).
	Filled bool
}

// Equal compares two values; how a value was learnt (filled) does not count.
func (v Value) Equal(o Value) bool {
	return v.Null == o.Null && v.N == o.N && v.S == o.S && v.Toast == o.Toast
}

// canonicalNaN is the one NaN bit pattern values carry, so that a NaN
// compares equal to itself when payloads are compared (Python's == says
// NaN != NaN, which would turn a replay of a NaN row into a conflict).
var canonicalNaN = math.Float64bits(math.NaN())

// FloatValue is f as a Value, NaN in its one canonical form (canonicalNaN).
func FloatValue(f float64) Value {
	if math.IsNaN(f) {
		return Value{N: canonicalNaN}
	}
	return Value{N: math.Float64bits(f)}
}

// Row is one captured change, canonical: the latest event of a key, the
// target's current row, or the read-back.
type Row struct {
	Key     string // canonical key bytes (EncodeKey)
	Version uint64 // the version (_cdc_lsn): the commit-order position, order.go; the source LSN or just above it
	Deleted bool
	// Vals holds one value per mapped column, in mapping order. A delete
	// fresh from the decoder holds its before image there (change.image)
	// until the batch merges it; merged, it holds the seed's zeros.
	Vals   []Value
	Record int64 // 1-based record number in the batch; 0 for rows read from ClickHouse
	Meta   Meta  // what the event said of its place in the history; zero for rows read from ClickHouse
	// Unchanged: some value is still Debezium's placeholder (Value.Toast),
	// to be taken from the row's previous version.
	Unchanged bool
	// FilledFrom is the oldest version of the batch's events a placeholder
	// was filled from (merge.keepUnchanged; 0: none): a target row newer
	// than it and older than the row was the row's previous version.
	FilledFrom uint64
}

// Meta is what an event says about its place in the source's history:
// the operation, the transaction, its LSN and the commit floor (order.go).
// SamePayload ignores it. It holds no pointer but interned strings: rows
// are copied by value through the decode.
type Meta struct {
	Op         string // metadata.operation (interned); "" when absent or not text
	TxID       int64  // metadata.source.txId, when txIDSet
	TxIDSet    bool
	DeletedSet bool   // the event carried the delete marker (absent reads as false)
	CommitSet  bool   // commit is set: the sequence's lsn_commit
	Sequenced  bool   // the event carried Debezium's metadata.source.sequence
	FloorSet   bool   // floor is set
	Image      bool   // a delete's vals hold a before image that tells rows apart
	LSN        uint64 // metadata.source.lsn
	Commit     uint64 // lsn_commit, the first element of metadata.source.sequence
	// Floor is the commit floor the version was raised to: commit, or the
	// snapshot LSN for the first transaction after a snapshot.
	Floor uint64
	// Sum is the event's hash (EventSum), folded into the batch's digest.
	Sum uint64
	// Snapshot is metadata.source.snapshot (interned: "true", "first",
	// "last", "last_in_data_collection", …); "" when absent or not text.
	// Not in the event's hash: batches applied before it was kept keep
	// their digests.
	Snapshot string
}

// SamePayload reports whether two rows are the same version: the seed
// compares the whole row dict, LSN and delete flag included.
func SamePayload(a, b *Row) bool {
	if a.Version != b.Version || a.Deleted != b.Deleted || len(a.Vals) != len(b.Vals) {
		return false
	}
	for i := range a.Vals {
		if !a.Vals[i].Equal(b.Vals[i]) {
			return false
		}
	}
	return true
}

// HashRow hashes the payload (for equal-LSN checks against versions that
// are no longer held in full).
func HashRow(seed maphash.Seed, r *Row) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	var b [9]byte
	binary.LittleEndian.PutUint64(b[:8], r.Version)
	if r.Deleted {
		b[8] = 1
	}
	h.Write(b[:])
	for _, v := range r.Vals {
		binary.LittleEndian.PutUint64(b[:8], v.N)
		b[8] = 0
		if v.Null {
			b[8] = 1
		}
		if v.Toast {
			b[8] |= 2
		}
		h.Write(b[:])
		binary.LittleEndian.PutUint64(b[:8], uint64(len(v.S)))
		h.Write(b[:8])
		h.WriteString(v.S)
	}
	return h.Sum64()
}

// EncodeKey appends the canonical bytes of the key values: 8 bytes per
// fixed-width value, a length-prefixed string otherwise.
func EncodeKey(dst []byte, m *mapping.Mapping, vals []Value) []byte {
	for _, i := range m.KeyIdx {
		v := vals[i]
		switch m.Cols[i].Type.Kind {
		case mapping.KindString, mapping.KindDecimal, mapping.KindUUID:
			dst = binary.AppendUvarint(dst, uint64(len(v.S)))
			dst = append(dst, v.S...)
		default:
			dst = binary.BigEndian.AppendUint64(dst, v.N)
		}
	}
	return dst
}

// CompareKeys orders rows by key the way the seed's sorted() orders ids:
// numbers numerically, strings by code point (= byte order), column by column.
func CompareKeys(m *mapping.Mapping, a, b *Row) int {
	for _, i := range m.KeyIdx {
		if c := compareValue(m.Cols[i].Type, a.Vals[i], b.Vals[i]); c != 0 {
			return c
		}
	}
	return 0
}

func compareValue(t mapping.Type, a, b Value) int {
	switch t.Kind {
	case mapping.KindInt, mapping.KindDate, mapping.KindDateTime, mapping.KindDateTime64:
		return cmpOrdered(int64(a.N), int64(b.N))
	case mapping.KindUint, mapping.KindBool:
		return cmpOrdered(a.N, b.N)
	case mapping.KindDecimal:
		x, _ := new(big.Int).SetString(a.S, 10)
		y, _ := new(big.Int).SetString(b.S, 10)
		if x == nil || y == nil {
			return strings.Compare(a.S, b.S)
		}
		return x.Cmp(y)
	default:
		return strings.Compare(a.S, b.S)
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

// RenderKey renders a row's key for messages: "id=42" or "a=1, b=x".
func RenderKey(m *mapping.Mapping, vals []Value) string {
	var b []byte
	for n, i := range m.KeyIdx {
		if n > 0 {
			b = append(b, ", "...)
		}
		b = append(b, m.Cols[i].Name...)
		b = append(b, '=')
		b = appendJSONValue(b, m.Cols[i].Type, vals[i])
	}
	return string(b)
}

// AppendJSON appends the row as the seed's json.dumps(row,
// ensure_ascii=False) writes it: the mapped columns in mapping order, then
// the version and deleted columns; separators ", " and ": ".
func AppendJSON(dst []byte, m *mapping.Mapping, r *Row) []byte {
	dst = append(dst, '{')
	for i := range m.Cols {
		dst = pyjson.AppendString(dst, m.Cols[i].Name)
		dst = append(dst, ": "...)
		dst = appendJSONValue(dst, m.Cols[i].Type, r.Vals[i])
		dst = append(dst, ", "...)
	}
	dst = pyjson.AppendString(dst, m.Target.VersionColumn)
	dst = append(dst, ": "...)
	dst = strconv.AppendUint(dst, r.Version, 10)
	dst = append(dst, ", "...)
	dst = pyjson.AppendString(dst, m.Target.DeletedColumn)
	if r.Deleted {
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
func appendJSONValue(dst []byte, t mapping.Type, v Value) []byte {
	if v.Toast { // only in a key the target holds newer: never written
		return pyjson.AppendString(dst, ToastPlaceholder)
	}
	if v.Null {
		return append(dst, "null"...)
	}
	switch t.Kind {
	case mapping.KindInt:
		return strconv.AppendInt(dst, int64(v.N), 10)
	case mapping.KindUint:
		return strconv.AppendUint(dst, v.N, 10)
	case mapping.KindFloat32, mapping.KindFloat64:
		return pyjson.AppendFloat(dst, math.Float64frombits(v.N))
	case mapping.KindDecimal:
		return AppendDecimal(dst, v.S, t.Scale)
	case mapping.KindString:
		return pyjson.AppendString(dst, v.S)
	case mapping.KindBool:
		if v.N != 0 {
			return append(dst, "true"...)
		}
		return append(dst, "false"...)
	case mapping.KindDate:
		dst = append(dst, '"')
		dst = time.Unix(int64(v.N)*86400, 0).UTC().AppendFormat(dst, "2006-01-02")
		return append(dst, '"')
	case mapping.KindDateTime:
		dst = append(dst, '"')
		dst = time.Unix(int64(v.N), 0).UTC().AppendFormat(dst, "2006-01-02T15:04:05Z")
		return append(dst, '"')
	case mapping.KindDateTime64:
		dst = append(dst, '"')
		dst = appendTicks(dst, int64(v.N), t)
		return append(dst, '"')
	case mapping.KindUUID:
		var u uuid.UUID
		copy(u[:], v.S)
		dst = append(dst, '"')
		dst = append(dst, u.String()...)
		return append(dst, '"')
	}
	return append(dst, "null"...)
}

// TicksTime converts DateTime64 ticks to a time.Time in UTC.
func TicksTime(ticks int64, t mapping.Type) time.Time {
	per := t.TicksPerSecond()
	sec, frac := ticks/per, ticks%per
	if frac < 0 {
		sec--
		frac += per
	}
	return time.Unix(sec, frac*(1_000_000_000/per)).UTC()
}

func appendTicks(dst []byte, ticks int64, t mapping.Type) []byte {
	tm := TicksTime(ticks, t)
	dst = tm.AppendFormat(dst, "2006-01-02T15:04:05")
	if t.Prec > 0 {
		per := t.TicksPerSecond()
		frac := ticks % per
		if frac < 0 {
			frac += per
		}
		s := strconv.FormatInt(frac, 10)
		dst = append(dst, '.')
		for range t.Prec - len(s) {
			dst = append(dst, '0')
		}
		dst = append(dst, s...)
	}
	return append(dst, 'Z')
}

// AppendDecimal renders an unscaled integer text at scale as a decimal number.
func AppendDecimal(dst []byte, unscaled string, scale int) []byte {
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

// ToastPlaceholder is Debezium's default unavailable.value.placeholder: the
// value of an unchanged TOASTed column under REPLICA IDENTITY DEFAULT.
const ToastPlaceholder = "__debezium_unavailable_value"

// Zero is what a delete writes in a non-key column: the seed writes 0
// and "" for a delete's other columns; Nullable columns get NULL.
func Zero(t mapping.Type) Value {
	switch {
	case t.Nullable:
		return Value{Null: true}
	case t.Kind == mapping.KindDecimal:
		return Value{S: "0"}
	case t.Kind == mapping.KindUUID:
		return Value{S: string(make([]byte, 16))}
	}
	return Value{}
}

// The operations Debezium's PostgreSQL connector sends, as Kestra's trigger
// names them in metadata.operation.
const (
	OpRead     = "READ"
	OpCreate   = "CREATE"
	OpUpdate   = "UPDATE"
	OpDelete   = "DELETE"
	OpTruncate = "TRUNCATE"
)

// TxMark is an event's transaction, when it carried one.
type TxMark struct {
	ID  int64
	Set bool
}

// MarkOf is the transaction of the event c describes.
func MarkOf(c *Meta) TxMark { return TxMark{c.TxID, c.TxIDSet} }
