package decode

import (
	"errors"
	"fmt"
	"io"

	"github.com/changesink/changesink/tasks/cdc/change"

	"github.com/amazon-ion/ion-go/ion"

	"github.com/changesink/changesink/tasks/cdc/internal/batchfile"
	"github.com/changesink/changesink/tasks/cdc/internal/ionesc"
)

// Malformed input becomes a *change.RecordError wrapping ErrMalformed,
// located in the file: ion-go reports an offset in what it was given (a
// segment, a line), which is shifted by where that starts in the file, in
// the refusal's Offset and in the ion-go error's own message alike.

// mendedReader reads text ionesc mended; its Err names an escape ionesc
// refused (ionesc.Explain), text reading the original from its start.
type mendedReader struct {
	ion.Reader
	text func() io.Reader
}

// Err is the reader's error, an escape ionesc refused explained.
func (r *mendedReader) Err() error {
	if err := r.Reader.Err(); err != nil {
		return ionesc.Explain(err, r.text())
	}
	return nil
}

// locate turns the relative offset of a malformed-Ion error into a file offset.
func locate(err error, base int64) error {
	var re *change.RecordError
	if errors.As(err, &re) && errors.Is(err, change.ErrMalformed) && re.Offset < 0 {
		if off := ionOffset(re.Err, base); off >= 0 {
			re.Offset = off
			if ie := ionError(re.Err); ie != nil {
				re.Err = malformedValue(adjustOffset(ie, base))
			}
		}
	}
	return err
}

// ionError returns the ion-go error that carries an offset in err's chain.
func ionError(err error) error {
	for e := err; e != nil; {
		if _, _, ok := shiftIon(e, 0); ok {
			return e
		}
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			e = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				if found := ionError(x); found != nil {
					return found
				}
			}
			return nil
		default:
			return nil
		}
	}
	return nil
}

// shiftIon returns a copy of e, an ion-go error that carries an offset,
// with b added to that offset, and the offset e carries; ok is false for
// any other error (shifted is e then). It is the one list of those types.
//
//lint:ignore ST1008 shifted is a value (a copy of e), not a failure
func shiftIon(e error, b uint64) (shifted error, offset uint64, ok bool) {
	switch e := e.(type) {
	case *ion.SyntaxError:
		return &ion.SyntaxError{Msg: e.Msg, Offset: e.Offset + b}, e.Offset, true
	case *ion.UnexpectedEOFError:
		return &ion.UnexpectedEOFError{Offset: e.Offset + b}, e.Offset, true
	case *ion.UnsupportedVersionError:
		return &ion.UnsupportedVersionError{Major: e.Major, Minor: e.Minor, Offset: e.Offset + b}, e.Offset, true
	case *ion.InvalidTagByteError:
		return &ion.InvalidTagByteError{Byte: e.Byte, Offset: e.Offset + b}, e.Offset, true
	case *ion.UnexpectedRuneError:
		return &ion.UnexpectedRuneError{Rune: e.Rune, Offset: e.Offset + b}, e.Offset, true
	case *ion.UnexpectedTokenError:
		return &ion.UnexpectedTokenError{Token: e.Token, Offset: e.Offset + b}, e.Offset, true
	case *ionesc.Error:
		return &ionesc.Error{Escape: e.Escape, Offset: e.Offset + b}, e.Offset, true
	}
	return e, 0, false
}

// ionOffset returns base plus the offset the ion-go error in err's chain
// reports, or -1.
func ionOffset(err error, base int64) int64 {
	if _, off, ok := shiftIon(ionError(err), 0); ok {
		return base + int64(off)
	}
	return -1
}

// adjustOffset returns a copy of an ion-go error with its offset made
// relative to the file, so its message names the file offset.
func adjustOffset(err error, base int64) error {
	if base == 0 {
		return err
	}
	shifted, _, _ := shiftIon(err, uint64(base))
	return shifted
}

// badRecord is the refusal of a value the framer refused.
func badRecord(rec int64, b *batchfile.Unframed) error {
	return &change.RecordError{Record: rec, Offset: b.Offset, Err: fmt.Errorf("%w: %s", change.ErrMalformed, b.Reason)}
}

// malformedValue is err, a failed read of a value, as ErrMalformed ("no
// value" for nil).
func malformedValue(err error) error {
	if err == nil {
		err = errors.New("no value")
	}
	return fmt.Errorf("%w: %w", change.ErrMalformed, err)
}
