package batchfile

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// MaxValueSize bounds one top-level binary value. ion-go allocates a value's
// declared length before reading it, so a garbled length could ask for
// gigabytes; the framer refuses such values itself, before ion-go sees them.
const MaxValueSize = 1 << 30

// Unframed is a top-level binary value the framer refused: its offset in
// the file and why. Nothing decodes it.
type Unframed struct {
	Offset int64
	Reason string
}

// frameHeader reads the header of the top-level binary value (or version
// marker) at br without consuming it, and returns its total length in
// bytes. bad explains a value that cannot be framed; err is io.EOF at a
// clean end of input.
func frameHeader(br *bufio.Reader) (total int64, isIVM bool, bad string, err error) {
	head, err := br.Peek(1)
	if len(head) == 0 {
		if err == nil || errors.Is(err, io.EOF) {
			return 0, false, "", io.EOF
		}
		return 0, false, "", err
	}
	head, _ = br.Peek(6)
	c := head[0]
	if c == 0xE0 {
		if len(head) >= 4 && bytes.Equal(head[:4], IVM) {
			return 4, true, "", nil
		}
		return 0, false, fmt.Sprintf("an unsupported or truncated version marker % x", head[:min(4, len(head))]), nil
	}
	t, l := c>>4, int64(c&0x0F)
	hdr, length := int64(1), l
	switch {
	case t == 0xF:
		return 0, false, fmt.Sprintf("invalid type byte 0x%02X", c), nil
	case t == 0x1 || l == 0x0F: // a bool, or a typed null: the byte is the value
		length = 0
	case (t == 0xD && l == 1) || l == 0x0E: // a sorted struct, or a VarUInt length
		v, n, ok := varUint(head[1:])
		if !ok {
			return 0, false, "a length that is not a VarUInt of at most 5 bytes (truncated or garbled)", nil
		}
		hdr, length = 1+int64(n), v
	}
	total = hdr + length
	if total > MaxValueSize {
		return 0, false, fmt.Sprintf("a value of %d bytes (garbled length; at most %d)", total, MaxValueSize), nil
	}
	return total, false, "", nil
}

// varUint decodes a binary Ion VarUInt (7 bits a byte, the high bit ends it).
func varUint(b []byte) (int64, int, bool) {
	var v int64
	for i := 0; i < len(b) && i < 5; i++ {
		v = v<<7 | int64(b[i]&0x7F)
		if b[i]&0x80 != 0 {
			return v, i + 1, true
		}
	}
	return 0, 0, false
}

// appendN appends the next n bytes of r to dst, growing dst as bytes
// arrive (never by a declared length); short reports a premature end.
func appendN(dst []byte, r io.Reader, n int64) (out []byte, short bool, err error) {
	for n > 0 {
		chunk := int(min(n, 64<<10))
		start := len(dst)
		dst = append(dst, make([]byte, chunk)...)
		got, err := io.ReadFull(r, dst[start:])
		dst = dst[:start+got]
		n -= int64(got)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return dst, true, nil
			}
			return dst, false, err
		}
	}
	return dst, false, nil
}

// Binary cuts a binary Ion file into segments that each start with a
// version marker, so every segment carries its own symbol tables (Kestra
// 2.x writes one before each row). A value that cannot be framed, or runs
// past the end of the file, ends the last segment as its Bad value. A file
// without markers to cut at returns ErrSequential once a segment would
// pass MaxBinarySegment.
func (sp *Splitter) Binary(f io.Reader, emit func(*Segment) error) error {
	br := bufio.NewReaderSize(f, 1<<20)
	// A segment ends at the first version marker past segmentSize; Kestra's
	// records are small, so this capacity is rarely outgrown. What the
	// reader holds bounds it for a small file.
	newSeg := func() []byte { return sp.buffer(min(segmentSize+64<<10, br.Buffered()+16<<10)) }
	var seg []byte
	var offset int64
	flush := func(bad *Unframed) error {
		if len(seg) == 0 && bad == nil {
			return nil
		}
		s := &Segment{Data: seg, Offset: offset, Bad: bad}
		offset += int64(len(seg))
		seg = nil
		return emit(s)
	}
	for {
		total, isIVM, bad, err := frameHeader(br)
		switch {
		case errors.Is(err, io.EOF):
			return flush(nil)
		case err != nil:
			return fmt.Errorf("read batch file: %w", err)
		case bad != "":
			return flush(&Unframed{Offset: offset + int64(len(seg)), Reason: bad})
		}
		if isIVM && len(seg) >= segmentSize {
			if err := flush(nil); err != nil {
				return err
			}
		}
		if !isIVM && len(seg) >= MaxBinarySegment {
			return ErrSequential
		}
		if seg == nil {
			seg = newSeg()
		}
		start := len(seg)
		var short bool
		seg, short, err = appendN(seg, br, total)
		if err != nil {
			return fmt.Errorf("read batch file: %w", err)
		}
		if short {
			seg = seg[:start]
			return flush(&Unframed{Offset: offset + int64(start),
				Reason: fmt.Sprintf("a value of %d bytes runs past the end of the file (truncated)", total)})
		}
	}
}

// ScanBinary frames a whole binary file without keeping it, for the
// one-stream decode: it returns the offset of the first bad value (and the
// value), or the file's length and nil.
func ScanBinary(f io.Reader) (int64, *Unframed, error) {
	br := bufio.NewReaderSize(f, 1<<20)
	var pos int64
	for {
		total, _, bad, err := frameHeader(br)
		switch {
		case errors.Is(err, io.EOF):
			return pos, nil, nil
		case err != nil:
			return 0, nil, fmt.Errorf("read batch file: %w", err)
		case bad != "":
			return pos, &Unframed{Offset: pos, Reason: bad}, nil
		}
		n, err := br.Discard(int(total))
		if err != nil {
			if errors.Is(err, io.EOF) {
				return pos, &Unframed{Offset: pos, Reason: fmt.Sprintf("a value of %d bytes runs past the end of the file (truncated)", total)}, nil
			}
			return 0, nil, fmt.Errorf("read batch file: %w", err)
		}
		pos += int64(n)
	}
}
