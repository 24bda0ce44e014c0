package pgvalue

import (
	"errors"
	"fmt"

	"github.com/changesink/changesink/tasks/cdc/change"
)

// Refusals of a mapping, a column or the replication connection, found
// before any value is read.
var (
	// ErrSettings: the replication connection's settings print values in
	// another form than the one read here (DateStyle not ISO,
	// extra_float_digits below 1, which rounds floats, bytea_output escape,
	// client_encoding not UTF8, IntervalStyle not postgres), or pgoutput
	// sent a binary value (binary 'true'). Settings lists what to set.
	ErrSettings = errors.New("the replication connection's settings change how values are printed")
	// ErrWrongType: a mapping's ClickHouse type, or its source_type, does
	// not fit the source column's PostgreSQL type (NewDecoder).
	ErrWrongType = errors.New("the mapping does not fit the source column's type")
	// ErrUnsupportedType: a column of a table without a mapping entry has a
	// type no mapping is generated for (Generate); a mapping can name it as
	// String, which holds PostgreSQL's text of any type.
	ErrUnsupportedType = errors.New("no generated mapping for the column's type")
	// ErrGeneratedColumn: a mapping entry names a STORED generated column
	// that the stream does not carry (PostgreSQL before 18, or a
	// publication that does not publish generated columns): its target
	// column would read NULL after every streamed change (OmitGenerated).
	ErrGeneratedColumn = errors.New("pgoutput does not stream the generated column")
)

// ErrNullable is returned when a mapping entry maps a source column that
// allows NULL to a type that is not Nullable (CheckNullable), as a "map it
// to String" entry may: its first NULL would stop the stream. A narrower
// cause of ErrWrongType.
var ErrNullable = fmt.Errorf("%w: the source column allows NULL", ErrWrongType)

// Refused values: each is a narrower cause of change.ErrBadValue (a
// refused value matches both; its message starts with both), with a remedy
// of its own.
var (
	// ErrSpecialValue: numeric NaN or ±Infinity, or a date or timestamp
	// ±infinity, in a type that has no such value (Decimal, an integer,
	// Date, DateTime, DateTime64).
	ErrSpecialValue = fmt.Errorf("%w: NaN or infinity", change.ErrBadValue)
	// ErrOutOfRange: a value beyond the column type's range or precision
	// (an integer's bounds, a Decimal's digits, the Date, DateTime or
	// DateTime64 range).
	ErrOutOfRange = fmt.Errorf("%w: out of range", change.ErrBadValue)
	// ErrWouldRound: a value the column's type would round (more decimal
	// places than a Decimal's scale, a fraction of a second DateTime or a
	// DateTime64's precision drops, a double that is not exactly a Float32).
	ErrWouldRound = fmt.Errorf("%w: it would be rounded", change.ErrBadValue)
	// ErrTooLong: a string longer than the column's max_length.
	ErrTooLong = fmt.Errorf("%w: longer than max_length", change.ErrBadValue)
	// ErrNotText: the bytes are not PostgreSQL's text output of the column's
	// type under the settings Settings names (a corrupt stream, a setting
	// that changed, text that is not UTF-8).
	ErrNotText = fmt.Errorf("%w: not PostgreSQL's text of its type", change.ErrBadValue)
)

// refuse returns a refused value: its cause, then what is wrong with it.
func refuse(cause error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", cause, fmt.Sprintf(format, args...))
}

// ColumnError locates a refusal of a column's mapping or type: the table,
// the column and its PostgreSQL type.
type ColumnError struct {
	Table  string // schema.table as the message names it; "" when unknown
	Column string
	Type   string // the PostgreSQL type, as typeName renders it
	Err    error  // wraps ErrWrongType or ErrUnsupportedType
}

func (e *ColumnError) Error() string {
	where := fmt.Sprintf("column %q (%s)", e.Column, e.Type)
	if e.Table != "" {
		where = "table " + e.Table + ", " + where
	}
	return where + ": " + e.Err.Error()
}

func (e *ColumnError) Unwrap() error { return e.Err }
