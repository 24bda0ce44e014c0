// Package batchfile cuts the batch files Kestra's Debezium trigger writes
// into segments of whole top-level values, so that workers can decode them
// concurrently: text Ion (Kestra 1.x) into runs of whole lines, binary Ion
// (Kestra 2.x, a version marker before each row) into runs that each start
// with a version marker. It also frames binary values before anything
// decodes them, so that a garbled length cannot make a decoder allocate
// gigabytes. It knows the file's layout, not the values in it.
package batchfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

// IVM is the binary Ion version marker that starts every binary stream;
// Kestra 2.x writes one before each row.
var IVM = []byte{0xE0, 0x01, 0x00, 0xEA}

// IsBinary reports whether a file starting with head is binary Ion.
func IsBinary(head []byte) bool { return len(head) >= 4 && bytes.Equal(head[:4], IVM) }

const (
	// segmentSize is the size at which the splitters cut a segment.
	segmentSize = 1 << 20
	// MaxBinarySegment bounds a binary segment that has no version marker to
	// cut at (a single-stream file not written by Kestra); beyond it
	// Splitter.Binary returns ErrSequential.
	MaxBinarySegment = 64 << 20
)

// ErrSequential says the file cannot be cut into segments and must be
// decoded as one stream.
var ErrSequential = errors.New("decode the file as one stream")

// Segment is a run of whole top-level values of the batch file. A text
// segment is whole lines; a binary segment starts with a version marker.
type Segment struct {
	Data      []byte
	Offset    int64     // byte offset of Data in the file
	FirstLine int64     // text: 1-based line number of the first line
	Lines     int64     // text: number of lines
	Bad       *Unframed // binary: the value after Data that could not be framed
}

// LineOf returns the text line of the segment's local record rec when the
// segment holds one record per line (records of them), else 0.
func (s *Segment) LineOf(rec, records int64) int64 {
	if s.FirstLine == 0 || records != s.Lines || rec < 1 {
		return 0
	}
	return s.FirstLine + rec - 1
}

// A Splitter cuts files into segments (Text, Binary), in buffers it takes
// back once their reader is done with a segment (Recycle): a batch
// then costs a few segments of memory, not its size in allocations. A nil
// Splitter allocates every buffer. Text and Binary may run while Recycle is
// called from another goroutine.
type Splitter struct {
	free chan []byte
}

// NewSplitter returns a Splitter that keeps up to buffers free buffers.
func NewSplitter(buffers int) *Splitter { return &Splitter{free: make(chan []byte, buffers)} }

// Recycle hands back the buffer of seg, which nothing may use afterwards.
func (sp *Splitter) Recycle(seg *Segment) {
	if sp == nil || cap(seg.Data) < segmentSize {
		return
	}
	select {
	case sp.free <- seg.Data[:0]:
	default:
	}
	seg.Data = nil
}

// buffer returns an empty buffer of at least capacity bytes.
func (sp *Splitter) buffer(capacity int) []byte {
	if sp != nil {
		select {
		case b := <-sp.free:
			if cap(b) >= capacity {
				return b
			}
		default:
		}
	}
	return make([]byte, 0, capacity)
}

// Text cuts a text Ion file into segments of whole lines of about 1 MiB
// (segmentSize).
func (sp *Splitter) Text(f io.Reader, emit func(*Segment) error) error {
	var carry []byte
	var offset int64
	line := int64(1)
	for {
		// A line longer than a segment doubles the buffer, so its bytes
		// are copied a logarithmic number of times, not once per segment.
		buf := sp.buffer(len(carry) + max(segmentSize, len(carry)))[:len(carry)]
		copy(buf, carry)
		n, err := io.ReadFull(f, buf[len(carry):cap(buf)])
		buf = buf[:len(carry)+n]
		eof := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
		if err != nil && !eof {
			return fmt.Errorf("read batch file: %w", err)
		}
		cut := len(buf)
		if !eof {
			cut = bytes.LastIndexByte(buf, '\n') + 1
			if cut == 0 { // one line longer than the buffer: read on
				carry = buf
				continue
			}
		}
		if cut > 0 {
			s := &Segment{Data: buf[:cut], Offset: offset, FirstLine: line}
			s.Lines = int64(bytes.Count(s.Data, []byte{'\n'}))
			if s.Data[len(s.Data)-1] != '\n' {
				s.Lines++
			}
			line += s.Lines
			offset += int64(cut)
			if err := emit(s); err != nil {
				return err
			}
		}
		if eof {
			return nil
		}
		carry = append([]byte(nil), buf[cut:]...)
	}
}
