package mapping

import (
	"errors"
	"fmt"
)

// ErrMapping: the mapping file is unreadable or has mistakes; see *MappingError.
var ErrMapping = errors.New("invalid mapping")

// MappingError is a mistake in the mapping file, located by line and column
// (1-based; 0 when the YAML parser gives no position).
type MappingError struct {
	File   string
	Line   int
	Column int
	Msg    string
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

// Unwrap makes every MappingError match ErrMapping.
func (e *MappingError) Unwrap() error { return ErrMapping }
