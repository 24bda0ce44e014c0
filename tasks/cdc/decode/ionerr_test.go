package decode

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/amazon-ion/ion-go/ion"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/internal/batchfile"
	"github.com/changesink/changesink/tasks/cdc/internal/ionesc"
)

// TestShiftIon: every ion-go error that carries an offset (and ionesc's)
// is copied with the offset moved, its other fields kept and the original
// untouched; any other error is not one.
func TestShiftIon(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string // the message of the copy shifted by 1000
	}{
		{&ion.SyntaxError{Msg: "bad", Offset: 7}, "ion: syntax error: bad (offset 1007)"},
		{&ion.UnexpectedEOFError{Offset: 7}, "ion: unexpected end of input (offset 1007)"},
		{&ion.UnsupportedVersionError{Major: 2, Minor: 1, Offset: 7}, "ion: unsupported version 2.1 (offset 1007)"},
		{&ion.InvalidTagByteError{Byte: 0xF1, Offset: 7}, "ion: invalid tag byte 0xF1 (offset 1007)"},
		{&ion.UnexpectedRuneError{Rune: 'x', Offset: 7}, "ion: unexpected rune 'x' (offset 1007)"},
		{&ion.UnexpectedTokenError{Token: "}", Offset: 7}, "ion: unexpected token '}' (offset 1007)"},
		{&ionesc.Error{Escape: `\ud800`, Offset: 7}, "offset 1007"},
	} {
		t.Run(fmt.Sprintf("%T", tc.err), func(t *testing.T) {
			before := tc.err.Error()
			shifted, off, ok := shiftIon(tc.err, 1000)
			if !ok || off != 7 || !strings.Contains(shifted.Error(), tc.want) {
				t.Errorf("shiftIon = %v, %d, %v; want a copy saying %q, 7, true", shifted, off, ok, tc.want)
			}
			if tc.err.Error() != before {
				t.Errorf("the original changed: %v", tc.err)
			}
		})
	}
	other := errors.New("not ion's")
	if shifted, off, ok := shiftIon(other, 1000); ok || off != 0 || shifted != other {
		t.Errorf("shiftIon(another error) = %v, %d, %v", shifted, off, ok)
	}
}

// TestIonOffset: the ion-go error is found through wrapping and joined
// errors, and its offset made a file offset; -1 when there is none.
func TestIonOffset(t *testing.T) {
	syntax := &ion.SyntaxError{Msg: "bad", Offset: 5}
	for _, tc := range []struct {
		name string
		err  error
		want int64
	}{
		{"bare", syntax, 105},
		{"wrapped", fmt.Errorf("read: %w", syntax), 105},
		{"malformed", malformedValue(syntax), 105},
		{"joined", errors.Join(errors.New("first"), fmt.Errorf("x: %w", syntax)), 105},
		{"none", fmt.Errorf("read: %w", errors.New("no offset")), -1},
		{"nil", nil, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ionOffset(tc.err, 100); got != tc.want {
				t.Errorf("ionOffset = %d, want %d", got, tc.want)
			}
		})
	}
	if got := adjustOffset(syntax, 0); got != syntax {
		t.Errorf("adjustOffset at base 0 = %v, want the error itself", got)
	}
}

// TestLocate: a malformed record without an offset gets the file offset
// of its ion-go error, and the error's message names it; a record with an
// offset, and other refusals, are left as they are.
func TestLocate(t *testing.T) {
	unlocated := func() *change.RecordError {
		return &change.RecordError{Record: 3, Offset: -1, Err: malformedValue(&ion.UnexpectedEOFError{Offset: 9})}
	}
	re := unlocated()
	if err := locate(re, 1000); err != re || re.Offset != 1009 || !strings.Contains(re.Err.Error(), "(offset 1009)") ||
		!errors.Is(re, change.ErrMalformed) {
		t.Errorf("located: offset %d, %v", re.Offset, re.Err)
	}
	re = unlocated()
	re.Offset = 42
	if locate(re, 1000); re.Offset != 42 || !strings.Contains(re.Err.Error(), "(offset 9)") {
		t.Errorf("a record with an offset: offset %d, %v", re.Offset, re.Err)
	}
	other := &change.RecordError{Record: 3, Offset: -1, Err: fmt.Errorf("%w: no", change.ErrNotStruct)}
	if locate(other, 1000); other.Offset != -1 {
		t.Errorf("another refusal was located: %d", other.Offset)
	}
}

// TestBadRecord and malformedValue: refusals of malformed input, with the
// framer's offset and reason, or "no value" for a missing one.
func TestBadRecord(t *testing.T) {
	err := badRecord(4, &batchfile.Unframed{Offset: 77, Reason: "a value cut short"})
	var re *change.RecordError
	if !errors.As(err, &re) || re.Record != 4 || re.Offset != 77 || !errors.Is(err, change.ErrMalformed) ||
		!strings.Contains(err.Error(), "a value cut short") {
		t.Errorf("badRecord = %v", err)
	}
	if err := malformedValue(nil); !errors.Is(err, change.ErrMalformed) || !strings.Contains(err.Error(), "no value") {
		t.Errorf("malformedValue(nil) = %v", err)
	}
}
