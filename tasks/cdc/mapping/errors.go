package mapping

import (
	"errors"
	"fmt"
)

// ErrMapping is returned when the mapping file is unreadable or has
// mistakes; see *MappingError.
var ErrMapping = errors.New("invalid mapping")

// Narrower causes of ErrMapping (a *MappingError matches both), each a
// mistake found only against the source's catalog, whose remedy is not at
// a line of the file: there may be no file at all.
var (
	// ErrTargetsShareName: two source tables map to one target name (or
	// live view, ledger or lock), most often through the defaults'
	// target.table pattern, "{table}" unless the file sets it, which names
	// a.items and b.items both items (CheckDistinct). The message names
	// what named each target: an entry's target.table, or the defaults'
	// pattern and the key that sets it, defaults.target.table.
	ErrTargetsShareName = fmt.Errorf("%w: two tables map to one target name", ErrMapping)
	// ErrNoKey: a table has no key to order its target by: no primary key
	// and no replica identity index (REPLICA IDENTITY FULL names every
	// column, which is no key), and its entry gives no key (Set.For).
	ErrNoKey = fmt.Errorf("%w: the table has no primary key", ErrMapping)
	// ErrMetaColumnName: a source column is named like the target's
	// version or delete-marker column (target.version_column,
	// target.deleted_column: _cdc_lsn and _cdc_deleted unless set), which
	// the target adds beside the mapped columns.
	ErrMetaColumnName = fmt.Errorf("%w: a column is named like the target's version or delete-marker column", ErrMapping)
)

// MappingError is a mistake in the mapping file, located by line and column
// (1-based; 0 when the YAML parser gives no position).
type MappingError struct {
	File   string
	Line   int
	Column int
	Msg    string
	// Err is the cause: ErrMapping, or a narrower cause of it; nil is
	// ErrMapping.
	Err error
}

func (e *MappingError) Error() string {
	file := e.File
	if file == "" {
		file = "mapping"
	}
	switch {
	case e.Line > 0 && e.Column > 0:
		return fmt.Sprintf("%s:%d:%d: %s", file, e.Line, e.Column, e.Msg)
	case e.Line > 0:
		return fmt.Sprintf("%s:%d: %s", file, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", file, e.Msg)
}

// Unwrap makes every MappingError match ErrMapping, and its narrower
// cause when it has one.
func (e *MappingError) Unwrap() error {
	if e.Err != nil {
		return e.Err
	}
	return ErrMapping
}
