package initload

import (
	"errors"
	"fmt"
)

// copyText splits what COPY … TO STDOUT writes in its text format into
// rows and fields, as the server's COPY writes them: rows end with a
// newline, fields are separated by a tab, NULL is \N, and a backslash
// escapes a backslash, the separators and the control characters (\b \f
// \n \r \t \v), or starts an octal (\ooo) or hexadecimal (\xhh) byte.
// Each field holds the type's output function's text, as pgoutput sends
// it. It is an io.Writer for pgconn's CopyTo: a row may span writes.
type copyText struct {
	// row receives each row's fields (nil: NULL); they are valid only
	// during the call.
	row     func(fields [][]byte) error
	pending []byte // the start of a row the next write completes
	fields  [][]byte
	// Rows and Bytes count what was read.
	Rows, Bytes int64
}

// errCopyText is a row COPY's text format does not allow.
var errCopyText = errors.New("malformed COPY text row")

// Write splits p's complete rows and keeps the rest for the next write.
func (c *copyText) Write(p []byte) (int, error) {
	c.Bytes += int64(len(p))
	data := p
	if len(c.pending) > 0 {
		c.pending = append(c.pending, p...)
		data = c.pending
	}
	start := 0
	for i := start; i < len(data); i++ {
		if data[i] != '\n' {
			continue
		}
		if err := c.line(data[start:i]); err != nil {
			return 0, err
		}
		start = i + 1
	}
	rest := data[start:]
	if len(c.pending) > 0 {
		c.pending = append(c.pending[:0], rest...)
	} else {
		c.pending = append(c.pending, rest...)
	}
	return len(p), nil
}

// Close reports a row left without its newline.
func (c *copyText) Close() error {
	if len(c.pending) > 0 {
		return fmt.Errorf("%w: %d bytes after the last row", errCopyText, len(c.pending))
	}
	return nil
}

// line unescapes one row in place (an escape is never shorter than what
// it stands for) and hands its fields to row.
func (c *copyText) line(b []byte) error {
	c.fields = c.fields[:0]
	w, r := 0, 0
	for {
		// A field: \N alone is NULL (a text \N is written \\N).
		if r+1 < len(b) && b[r] == '\\' && b[r+1] == 'N' && (r+2 == len(b) || b[r+2] == '\t') {
			c.fields = append(c.fields, nil)
			r += 2
		} else {
			start := w
			for r < len(b) && b[r] != '\t' {
				if b[r] != '\\' {
					b[w] = b[r]
					w, r = w+1, r+1
					continue
				}
				if r+1 >= len(b) {
					return fmt.Errorf("%w: a backslash at the end of row %d", errCopyText, c.Rows+1)
				}
				n, used := unescape(b[r+1:])
				b[w] = n
				w, r = w+1, r+1+used
			}
			c.fields = append(c.fields, b[start:w:w])
		}
		if r == len(b) {
			break
		}
		r++ // the tab
	}
	c.Rows++
	return c.row(c.fields)
}

// unescape reads the escape after a backslash: the byte it stands for
// and how many bytes of b it used.
func unescape(b []byte) (byte, int) {
	switch b[0] {
	case 'b':
		return '\b', 1
	case 'f':
		return '\f', 1
	case 'n':
		return '\n', 1
	case 'r':
		return '\r', 1
	case 't':
		return '\t', 1
	case 'v':
		return '\v', 1
	case 'x':
		v, n := 0, 0
		for n < 2 && 1+n < len(b) && hexVal(b[1+n]) >= 0 {
			v = v*16 + hexVal(b[1+n])
			n++
		}
		if n == 0 {
			return 'x', 1
		}
		return byte(v), 1 + n
	}
	if b[0] >= '0' && b[0] <= '7' {
		v, n := 0, 0
		for n < 3 && n < len(b) && b[n] >= '0' && b[n] <= '7' {
			v = v*8 + int(b[n]-'0')
			n++
		}
		return byte(v), n
	}
	return b[0], 1
}

func hexVal(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}
