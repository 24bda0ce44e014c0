// Package ionesc mends the \u and \U escapes of Ion text that ion-go
// decodes into a changed value, before ion-go reads the text.
//
// ion-go (v1.5.0, tokenizer.readEscapedChar) decodes each \u escape on its
// own and writes the code point with strings.Builder.WriteRune, so a
// character beyond U+FFFF written as a UTF-16 surrogate pair,
// "\ud83d\ude00", reads as two U+FFFD, and a lone surrogate "\ud800", or
// \U0000D800 or \U00110000, as one U+FFFD; no error. What Ion says:
//
//   - The conformance suite reads a pair as the one character it encodes
//     (amazon-ion/ion-tests, iontestdata/good/equivs/utf8/stringUtf8.ion:
//     "\ud800\udc00" is "\U00010000", "\udbff\udfff" is "\U0010ffff").
//   - It refuses a lone surrogate escape in a string, a quoted symbol and a
//     long string, and a pair split across two long-string literals
//     (iontestdata/bad/utf8/surrogate_1.ion to surrogate_10.ion).
//   - The specification leaves surrogate escapes to the implementation and
//     "highly recommend[s]" refusing escapes that are not proper Unicode
//     (amazon-ion/ion-docs, docs/stringclob.md, "Ion String"); its grammar
//     allows \U only up to \U0010FFFF (grammar/IonText.g4.txt,
//     UNICODE_ESCAPE).
//   - The seed's reader (Python amazon.ion 0.15.0, simpleion.loads) reads
//     the pair as its character and refuses the others.
//
// Fix rewrites text so that ion-go reads it so, keeping every byte at its
// offset: a pair becomes the \U escape of its character followed by an
// escaped newline (a backslash and a line feed, which Ion drops from
// strings and symbols), and an escape that names no character (a lone
// surrogate, a \U of a surrogate or beyond U+10FFFF) becomes an escape
// ion-go refuses, at the same offset. Explain turns that refusal into an
// *Error naming the escape. Reader does what Fix does to a stream.
//
// The escapes of a clob are left alone: ion-go refuses \u and \U there.
package ionesc

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"unicode"
	"unicode/utf16"

	"github.com/amazon-ion/ion-go/ion"
)

// Error is the refusal of an escape that names no Unicode character.
type Error struct {
	// Escape is the escape as written, e.g. \ud800.
	Escape string
	// Offset is where it starts, as ion-go counts offsets (a CR LF is one).
	Offset uint64
}

func (e *Error) Error() string {
	what := "a lone UTF-16 surrogate: a pair is a high one, \\ud800 to \\udbff, then a low one, \\udc00 to \\udfff"
	if e.Escape[1] == 'U' {
		what = "a surrogate, or beyond U+10FFFF"
	}
	return fmt.Sprintf("ion: the escape %s names no Unicode character (%s); write a character above U+FFFF as UTF-8, "+
		"as \\U0001F600 or as a pair \\ud83d\\ude00 (offset %d)", e.Escape, what, e.Offset)
}

// Fix returns text with its escapes mended (see the package comment), a
// copy, and true; or text itself and false when there is nothing to mend.
func Fix(text []byte) ([]byte, bool) {
	if !bytes.Contains(text, []byte(`\u`)) && !bytes.Contains(text, []byte(`\U`)) {
		return text, false
	}
	out := bytes.Clone(text)
	var s scanner
	s.scan(out, true)
	if !s.mended {
		return text, false
	}
	return out, true
}

// Explain returns the *Error that err stands for when err is ion-go's
// refusal of an escape Fix (or Reader) marked; text reads the original
// text from its start, which Explain scans again up to err's offset.
// Any other err is returned as it is.
func Explain(err error, text io.Reader) error {
	var se *ion.SyntaxError
	if !errors.As(err, &se) {
		return err
	}
	var found *Error
	r := NewReader(text)
	r.s.refused = func(pos uint64, esc []byte) bool {
		if pos == se.Offset {
			found = &Error{Escape: string(esc), Offset: pos}
		}
		return pos < se.Offset
	}
	if _, rerr := io.Copy(io.Discard, r); rerr != nil || found == nil {
		return err
	}
	return found
}

// Reader reads a stream of Ion text mended as Fix mends it.
type Reader struct {
	in  io.Reader
	s   scanner
	buf []byte
	// buf[r:w] is mended and not read yet; buf[w:end] waits for more
	// bytes to tell what it starts.
	r, w, end int
	err       error
}

// NewReader returns a Reader of in.
func NewReader(in io.Reader) *Reader {
	return &Reader{in: in, buf: make([]byte, 64<<10)}
}

func (x *Reader) Read(p []byte) (int, error) {
	for x.r == x.w {
		if x.err != nil || x.s.stopped {
			if x.err == nil {
				return 0, io.EOF
			}
			return 0, x.err
		}
		x.end = copy(x.buf, x.buf[x.w:x.end])
		x.r, x.w = 0, 0
		n, err := x.in.Read(x.buf[x.end:])
		x.end += n
		if err != nil {
			x.err = err
		}
		x.w = x.s.scan(x.buf[:x.end], x.err != nil)
	}
	n := copy(p, x.buf[x.r:x.w])
	x.r += n
	return n, nil
}

// mode is where in the text a scanner is.
type mode uint8

const (
	top          mode = iota // between values
	short                    // in a "string" (or a clob's)
	quoted                   // in a 'symbol'
	long                     // in a '''long string''' (or a clob's)
	lineComment              // in a // comment
	blockComment             // in a /* comment */
	lob                      // in a {{blob}} or {{clob}}, outside its strings
)

// scanner follows Ion text far enough to find the escapes of its strings
// and symbols.
type scanner struct {
	mode mode
	// inLob: the string is a clob's.
	inLob bool
	// pos is ion-go's offset of the next byte (ion-go reads CR LF as one
	// byte); cr says the last byte was a CR.
	pos uint64
	cr  bool
	// refused, when set, is told of each escape that names no character
	// (before it is mended); false stops the scan.
	refused func(pos uint64, esc []byte) bool
	stopped bool
	mended  bool // an escape was mended
}

// poison replaces an escape's letter: backslash and '!' is no Ion escape.
const poison = '!'

// scan mends b in place from its start and returns how far it is done;
// the bytes after that (unless final) may start something that needs more
// bytes to tell, and are to be passed again with what follows them.
func (s *scanner) scan(b []byte, final bool) int {
	i := 0
	for i < len(b) && !s.stopped {
		if plain(b[i]) { // a run of bytes that start nothing, in any mode
			j := i + 1
			for j < len(b) && plain(b[j]) {
				j++
			}
			s.pos += uint64(j - i)
			s.cr = false
			i = j
			continue
		}
		n := s.token(b, i, final)
		if n == 0 {
			return i
		}
		for _, c := range b[i : i+n] {
			if c != '\n' || !s.cr {
				s.pos++
			}
			s.cr = c == '\r'
		}
		i += n
	}
	if s.stopped {
		return len(b)
	}
	return i
}

// plain reports a byte that starts nothing in any mode and is no line end.
func plain(c byte) bool {
	switch c {
	case '"', '\'', '/', '{', '}', '*', '\\', '\r', '\n':
		return false
	}
	return true
}

// token handles what starts at b[i] and returns its length in bytes, or 0
// when that needs more bytes than b holds (never when final).
func (s *scanner) token(b []byte, i int, final bool) int {
	// has reports whether b holds n bytes from i; when it does not, and
	// more may come, token returns 0.
	has := func(n int) bool { return i+n <= len(b) }
	more := func(n int) bool { return !has(n) && !final }
	// closes steps over the closer c, second ("}}", "*/"), back to top;
	// over c alone when second does not follow.
	closes := func(second byte) int {
		if more(2) {
			return 0
		}
		if has(2) && b[i+1] == second {
			s.mode = top
			return 2
		}
		return 1
	}
	c := b[i]
	switch s.mode {
	case top, lob:
		switch {
		case c == '"':
			s.inLob, s.mode = s.mode == lob, short
		case c == '\'':
			if more(3) {
				return 0
			}
			if has(3) && b[i+1] == '\'' && b[i+2] == '\'' {
				s.inLob, s.mode = s.mode == lob, long
				return 3
			}
			if s.mode == top {
				s.mode = quoted
			}
		case s.mode == top && (c == '/' || c == '{'):
			if more(2) {
				return 0
			}
			switch {
			case !has(2):
			case c == '/' && b[i+1] == '/':
				s.mode = lineComment
				return 2
			case c == '/' && b[i+1] == '*':
				s.mode = blockComment
				return 2
			case c == '{' && b[i+1] == '{':
				s.mode = lob
				return 2
			}
		case s.mode == lob && c == '}':
			return closes('}')
		}
		return 1
	case lineComment:
		if c == '\n' || c == '\r' {
			s.mode = top
		}
		return 1
	case blockComment:
		if c == '*' {
			return closes('/')
		}
		return 1
	}
	// In a string or a symbol.
	end := func() {
		s.mode = top
		if s.inLob {
			s.mode = lob
		}
	}
	switch c {
	case '\\':
		return s.escape(b, i, final)
	case '"':
		if s.mode == short {
			end()
		}
	case '\'':
		switch {
		case s.mode == quoted:
			end()
		case s.mode == long:
			if more(3) {
				return 0
			}
			if has(3) && b[i+1] == '\'' && b[i+2] == '\'' {
				end()
				return 3
			}
		}
	}
	return 1
}

// escape handles the escape at b[i] (a backslash in a string or symbol).
func (s *scanner) escape(b []byte, i int, final bool) int {
	n := 2
	switch {
	case i+1 >= len(b):
		if !final {
			return 0
		}
		return 1
	case s.inLob:
	case b[i+1] == 'u':
		n = 6
	case b[i+1] == 'U':
		n = 10
	}
	if n == 2 {
		return 2 // \\, \", \n, an escaped newline, ...: ion-go decodes them right
	}
	if i+n > len(b) {
		if !final {
			return 0
		}
		return 2 // cut short: ion-go refuses it
	}
	v, ok := hex(b[i+2 : i+n])
	if !ok {
		return 2 // ion-go refuses it
	}
	switch {
	case n == 10 && (v > unicode.MaxRune || utf16.IsSurrogate(rune(v))), n == 6 && v >= 0xDC00 && v <= 0xDFFF:
		return s.refuse(b, i, n)
	case n == 6 && v >= 0xD800 && v <= 0xDBFF:
		if i+12 > len(b) && !final {
			return 0
		}
		if i+12 <= len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
			if lo, ok := hex(b[i+8 : i+12]); ok && lo >= 0xDC00 && lo <= 0xDFFF {
				r := utf16.DecodeRune(rune(v), rune(lo))
				// 12 bytes, as the pair: \U and 8 digits, an escaped newline.
				copy(b[i:i+12], fmt.Sprintf("\\U%08X\\\n", r))
				s.mended = true
				return 12
			}
		}
		return s.refuse(b, i, 6)
	}
	return n
}

// refuse marks the n-byte escape at b[i] for ion-go to refuse.
func (s *scanner) refuse(b []byte, i, n int) int {
	if s.refused != nil && !s.refused(s.pos, b[i:i+n]) {
		s.stopped = true
	}
	b[i+1] = poison
	s.mended = true
	return n
}

// hex reads hexadecimal digits.
func hex(d []byte) (uint32, bool) {
	var v uint32
	for _, c := range d {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		v = v<<4 | uint32(c)
	}
	return v, true
}
