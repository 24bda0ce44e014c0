// Package ionrec reads the change records of Kestra's Debezium batches
// straight from their bytes: binary Ion as Kestra 2.x writes it (a version
// marker and a local symbol table before every record; identical tables
// are recognised by their bytes and reused) and text Ion as Kestra 1.x
// writes it (one struct per line). It reads a record of a known Shape —
// top-level fields, the fields of one struct among them, and of one struct
// inside that — into scalars by slot, without reflection and without
// allocating per value. A top-level field holding exactly Debezium's
// {scale, value} struct (an unconstrained numeric) is read as one scalar.
//
// It reads a subset of Ion on purpose: whatever falls outside the shapes it
// recognises (a nested value where a scalar is expected, a repeated field,
// an annotation at top level, a symbol table with imports, a NOP pad,
// comments, long strings, numbers it cannot hold in 64 bits, unusual text
// forms) makes it return ErrFallback for that run of bytes, and the caller
// reads them with ion-go instead. So the accepted language stays exactly
// Ion's as ion-go reads it: this package never refuses input, and what it
// accepts it reads as ion-go does (pinned by the differential tests), text
// after ionesc.Fix: a surrogate pair of \u escapes is the character it
// encodes, where ion-go alone reads two U+FFFD.
package ionrec

import (
	"errors"
	"math/big"
	"time"

	"github.com/amazon-ion/ion-go/ion"
)

// ErrFallback says the bytes are outside the shapes this package reads;
// read them with ion-go.
var ErrFallback = errors.New("ionrec: outside the recognised shapes; read with ion-go")

// Scalar is one value as read. Type is ion.NoType when the field is absent.
// A container (list, sexp, or a struct not named by the Shape) is reported
// by its Type alone.
type Scalar struct {
	Type ion.Type
	// Null is set for null and typed nulls (null.string is StringType).
	Null bool
	// Neg and Mag are an int's sign and magnitude, or a decimal
	// coefficient's; Neg with Mag 0 is a negative zero.
	Neg bool
	Mag uint64
	// Big holds an int, or a decimal coefficient, beyond 64 bits (then Mag
	// and Neg are unused). The fast readers never set it (they fall back);
	// ReadScalar does.
	Big *big.Int
	// Exp is a decimal's exponent: the value is ±Mag × 10^Exp.
	Exp int32
	// NegZero marks a decimal ion-go calls a negative zero (it prints -0.).
	NegZero bool
	// Float is a float's value; Bool a bool's.
	Float float64
	Bool  bool
	// Bytes is a string's or symbol's text, or a blob's or clob's content.
	// It aliases the input or the Reader's buffer: valid until the next
	// record.
	Bytes []byte
	// NoText marks a symbol known only by its ID (never set here).
	NoText bool
	// VarScale marks Debezium's VariableScaleDecimal, a top-level struct
	// of exactly {scale: int, value: blob} (an unconstrained numeric): Exp
	// is minus the scale, Bytes the value's big-endian two's complement.
	// Type stays StructType.
	VarScale bool
	// Sec and Nsec are a timestamp's instant (Unix seconds and
	// nanoseconds), Prec its precision; a timestamp of day precision or less
	// is midnight UTC of its date.
	Sec  int64
	Nsec int32
	Prec ion.TimestampPrecision
}

// Time returns a timestamp's instant, in UTC.
func (s *Scalar) Time() time.Time { return time.Unix(s.Sec, int64(s.Nsec)).UTC() }

// Shape names the fields a caller wants, at three levels: Fields[0] of the
// top-level struct, Fields[1] of the struct in the top-level field
// Fields[0][Nest[0]], Fields[2] of the struct in Fields[1][Nest[1]].
type Shape struct {
	Fields [3][]string
	Nest   [2]int
}

// Record is one record read by slot: Fields[level][slot] follows the
// Shape. A nested struct's own slot holds a Scalar of StructType.
type Record struct {
	Fields [3][]Scalar
	// Unknown is the first top-level field the Shape does not name, "" when
	// there is none.
	Unknown string
}

// NewRecord returns an empty record for s.
func NewRecord(s *Shape) *Record {
	r := &Record{}
	for l := range r.Fields {
		r.Fields[l] = make([]Scalar, len(s.Fields[l]))
	}
	return r
}

// Reset empties the record.
func (r *Record) Reset() {
	for l := range r.Fields {
		clear(r.Fields[l])
	}
	r.Unknown = ""
}

// Reader reads records of one Shape. It is not safe for concurrent use.
type Reader struct {
	shape  Shape
	names  [3]map[string]int
	tables map[string]*symtab // local symbol tables by their bytes
	table  *symtab            // the table in force
	// last is the local symbol table read last, and lastLST its bytes:
	// records in a row mostly repeat it.
	last    *symtab
	lastLST []byte
	buf     []byte // unescaped text of the current record
	// order holds, per level, the field names in the order the last
	// records had them, with their slots (see slotAt).
	order   [3][]namedSlot
	scratch Scalar // where checked-only values go
}

// NewReader returns a Reader for s.
func NewReader(s Shape) *Reader {
	r := &Reader{shape: s, tables: map[string]*symtab{}}
	for l := range r.names {
		r.names[l] = make(map[string]int, len(s.Fields[l]))
		for i, n := range s.Fields[l] {
			r.names[l][n] = i
		}
	}
	r.table = r.systemTable()
	return r
}

// nest reports whether slot at level holds the next level's struct.
func (r *Reader) nest(level, slot int) bool { return level < 2 && r.shape.Nest[level] == slot }

// maxDepth bounds the nesting of values this package walks.
const maxDepth = 32

// Bounds of a VarScale struct this package reads; others are left to the
// caller's reader as plain structs.
const (
	maxVarScale      = 1000
	maxVarScaleBytes = 64
)
