package decode

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"

	"github.com/amazon-ion/ion-go/ion"
	"golang.org/x/sync/errgroup"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/internal/batchfile"
	"github.com/changesink/changesink/tasks/cdc/internal/ionesc"
	"github.com/changesink/changesink/tasks/cdc/internal/ionrec"
)

// segResult is what the decode of one segment gave: its rows, or the
// refusal of the record that stopped it.
type segResult struct {
	rows  []change.Row // local record numbers (1-based within the segment)
	n     int64        // records decoded, including the failing one
	err   error        // *RecordError with local record numbers, or nil
	lined bool         // decoded line by line (a refusal names its line)
}

// Options say how Scan reads a batch.
type Options struct {
	// Workers decode segments concurrently (at least 1).
	Workers int
	// IonOnly reads every record with ion-go, never with ionrec: the
	// oracle the differential tests hold the default against.
	IonOnly bool
}

// decoder is a record decoder of m as o asks: ion-go's alone (IonOnly),
// or the fast reader with ion-go for what it cannot read.
func (o Options) decoder(m *mapping.Mapping) *recordDecoder {
	if o.IonOnly {
		return newIonDecoder(m)
	}
	return newRecordDecoder(m)
}

// utf8BOM is the byte order mark some editors put at the start of a text
// file.
const utf8BOM = "\xEF\xBB\xBF"

// Scan decodes the file and hands every valid row to sink, in file
// order; reset is called before a fallback to the one-stream decode
// starts again from the first record.
func Scan(ctx context.Context, path string, m *mapping.Mapping, opts Options, reset func(), sink func(change.Row) error) error {
	f, err := os.Open(path)
	if err != nil {
		return outcome.Config.Mark(fmt.Errorf("%w: cannot open the batch file: %w", change.ErrConfig, err))
	}
	head := make([]byte, 4)
	n, _ := io.ReadFull(f, head)
	f.Close()
	if strings.HasPrefix(string(head[:n]), utf8BOM) {
		return &change.RecordError{Record: 1, Offset: 0, Err: fmt.Errorf("%w: the file starts with a UTF-8 byte order mark (EF BB BF), which Ion text does not allow",
			change.ErrMalformed)}
	}
	binary := batchfile.IsBinary(head[:n])

	perr := decodeSegments(ctx, path, m, opts, binary, sink)
	if perr == nil {
		return nil
	}
	fallback := errors.Is(perr, batchfile.ErrSequential)
	if !fallback && !(errors.Is(perr, change.ErrMalformed) && !binary) {
		return perr
	}
	// Text that failed to parse line by line may still be valid Ion whose
	// values span lines; binary without markers to cut at is one stream.
	reset()
	serr := decodeStream(ctx, path, m, sink)
	if serr == nil || fallback || !errors.Is(serr, change.ErrMalformed) {
		return serr
	}
	// Both failed to parse: the line-located error reads better, unless
	// only the stream got as far as an escape that names no character.
	var esc *ionesc.Error
	if errors.As(serr, &esc) && !errors.As(perr, &esc) {
		return serr
	}
	return perr
}

// decodeSegments runs the splitter, the workers and the in-order merge. It
// returns only once the splitter and every worker have stopped, so a
// fallback that decodes the file again never runs beside them.
func decodeSegments(parent context.Context, path string, m *mapping.Mapping, opts Options, binary bool, sink func(change.Row) error) error {
	workers := max(opts.Workers, 1)
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open batch file: %w", err)
	}
	defer f.Close()

	jobs := make(chan segJob)
	order := make(chan segJob, 2*workers)
	// Segment buffers come back once merged: a batch allocates a few
	// segments, not its size.
	split := batchfile.NewSplitter(2*workers + 2)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(order)
		defer close(jobs)
		emit := func(s *batchfile.Segment) error {
			j := segJob{seg: s, out: make(chan segResult, 1)}
			select {
			case order <- j:
			case <-gctx.Done():
				return gctx.Err()
			}
			select {
			case jobs <- j:
			case <-gctx.Done():
				return gctx.Err()
			}
			return nil
		}
		if binary {
			return split.Binary(f, emit)
		}
		return split.Text(f, emit)
	})
	for range workers {
		g.Go(func() error {
			d := opts.decoder(m)
			for j := range jobs {
				j.out <- decodeSegment(d, j.seg, binary)
			}
			return nil
		})
	}
	merr := mergeSegments(ctx, opts.decoder, m, order, binary, sink, split.Recycle)
	cancel()
	for range order { // unblock the splitter
	}
	serr := g.Wait()
	switch {
	case merr != nil:
		return merr
	case serr != nil:
		return serr
	}
	return parent.Err()
}

// segJob is one segment on its way through a worker; out receives its result.
type segJob struct {
	seg *batchfile.Segment
	out chan segResult
}

// mergeSegments hands the rows of each segment to sink in file order,
// numbering records across segments, until order closes or a refusal.
// Each merged segment goes to done (no row refers to its bytes).
func mergeSegments(ctx context.Context, newDecoder func(*mapping.Mapping) *recordDecoder, m *mapping.Mapping, order <-chan segJob, binary bool,
	sink func(change.Row) error, done func(*batchfile.Segment)) error {
	var base int64
	for j := range order {
		var res segResult
		select {
		case res = <-j.out:
		case <-ctx.Done():
			return ctx.Err()
		}
		if res.err != nil && !binary && !res.lined {
			// Locate the failure by line: decode the segment line by line.
			res = decodeLines(newDecoder(m), j.seg)
		}
		for i := range res.rows {
			r := res.rows[i]
			local := r.Record
			r.Record += base
			if err := sink(r); err != nil {
				var re *change.RecordError
				if errors.As(err, &re) && !binary {
					re.Line = j.seg.LineOf(local, res.n)
				}
				return err
			}
		}
		if res.err != nil {
			var re *change.RecordError
			if errors.As(res.err, &re) && re.Record > 0 {
				re.Record += base
			}
			return res.err
		}
		base += res.n
		done(j.seg)
	}
	return nil
}

// decodeSegment decodes a segment: record by record with the fast reader
// (ionrec) where the records have the shapes Kestra writes, with ion-go
// for the rest; binary says which form the file is in (a text segment is
// never read as binary). Binary Ion goes chunk by chunk (a version marker
// and what follows it up to the next); a chunk ionrec cannot read is read
// by ion-go from its version marker on. Text goes line by line (as
// decodeLines); when a line may depend on its neighbours, the segment is
// read as one ion-go stream instead.
func decodeSegment(d *recordDecoder, s *batchfile.Segment, binary bool) segResult {
	switch {
	case d.fast != nil && binary && batchfile.IsBinary(s.Data):
		return d.binarySegment(s)
	case d.fast != nil && !binary:
		if res, odd := d.lines(s, true); !odd {
			return res
		}
	}
	var res segResult
	if err := res.decodeIon(d, s.Data, s.Offset, binary); err != nil {
		res.err = err
		return res
	}
	if s.Bad != nil {
		res.n++
		res.err = badRecord(res.n, s.Bad)
	}
	return res
}

// binarySegment decodes a binary segment chunk by chunk with the fast
// reader, handing a chunk it cannot read to ion-go.
func (d *recordDecoder) binarySegment(s *batchfile.Segment) segResult {
	// Kestra writes a version marker before each record.
	res := segResult{rows: make([]change.Row, 0, bytes.Count(s.Data, batchfile.IVM))}
	for off := 0; off < len(s.Data); {
		n := ionrec.NextChunk(s.Data[off:])
		chunk := s.Data[off : off+n]
		rows, recs := len(res.rows), res.n
		err := d.fast.Binary(chunk, &d.rec.Record, func(*ionrec.Record) error {
			row, err := d.finishFast(res.n + 1)
			if err != nil {
				return err
			}
			res.n++
			res.rows = append(res.rows, row)
			return nil
		})
		switch {
		case errors.Is(err, ionrec.ErrFallback):
			d.fallbacks++
			res.rows, res.n = res.rows[:rows], recs
			if err := res.decodeIon(d, chunk, s.Offset+int64(off), true); err != nil {
				res.err = err
				return res
			}
		case err != nil:
			res.n++
			res.err = err
			return res
		}
		off += n
	}
	if s.Bad != nil {
		res.n++
		res.err = badRecord(res.n, s.Bad)
	}
	return res
}

// finishFast checks the record the fast reader just read, unless ion-go
// must read it (ErrFallback).
func (d *recordDecoder) finishFast(rec int64) (change.Row, error) {
	d.rec.dup = ""
	clear(d.rec.errs)
	if d.needsIon(d.rec) {
		return change.Row{}, ionrec.ErrFallback
	}
	return d.finish(d.rec, rec)
}

// decodeIon decodes data, at offset base in the file, as one ion-go
// stream, appending to res; it returns the first refusal, located.
func (res *segResult) decodeIon(d *recordDecoder, data []byte, base int64, binary bool) error {
	r := ion.NewReaderBytes(data)
	if !binary {
		r = textReader(data)
	}
	if err := res.decodeAll(d, r); err != nil {
		return locate(err, base)
	}
	if err := r.Err(); err != nil {
		res.n++
		return &change.RecordError{Record: res.n, Offset: ionOffset(err, base), Err: malformedValue(adjustOffset(err, base))}
	}
	return nil
}

// decodeAll decodes every value r yields (version markers skipped) and
// appends the rows to res, counting records; it stops at the first
// refusal and returns it unlocated. The caller checks r.Err.
func (res *segResult) decodeAll(d *recordDecoder, r ion.Reader) error {
	for r.Next() {
		if isVersionSymbol(r) {
			continue
		}
		res.n++
		row, err := d.decode(r, res.n)
		if err != nil {
			return err
		}
		res.rows = append(res.rows, row)
	}
	return nil
}

// textReader reads data as text Ion. ion-go picks the binary reader when
// data starts with a binary version marker, and the binary reader allocates
// the lengths it reads; garbage in a text file must not get there. The
// surrogate escapes ion-go reads as U+FFFD are mended first (ionesc).
func textReader(data []byte) ion.Reader {
	if len(data) > 0 && data[0] == 0xE0 {
		data = append([]byte{' '}, data...)
	}
	fixed, mended := ionesc.Fix(data)
	if !mended {
		return ion.NewReaderBytes(data)
	}
	return &mendedReader{Reader: ion.NewReaderBytes(fixed), text: func() io.Reader { return bytes.NewReader(data) }}
}

// decodeLines decodes a text segment line by line, which pins a truncated
// or garbled record to its line (a stream parse reads a truncated line into
// the next ones).
func decodeLines(d *recordDecoder, s *batchfile.Segment) segResult {
	res, _ := d.lines(s, false)
	return res
}

// lines decodes a text segment line by line: with the fast reader, or
// with ion-go for the line alone. odd reports a line whose meaning may
// depend on its neighbours (a long string, a block comment, a symbol table
// or version marker, or a line ion-go cannot read alone, such as part of a
// value spanning lines); with stopAtOdd, lines stops there.
func (d *recordDecoder) lines(s *batchfile.Segment, stopAtOdd bool) (res segResult, odd bool) {
	res.lined = true
	res.rows = make([]change.Row, 0, s.Lines)
	data := s.Data
	var off int64
	line := s.FirstLine
	for len(data) > 0 {
		end := bytes.IndexByte(data, '\n')
		var text []byte
		if end < 0 {
			text, data = data, nil
		} else {
			text, data = data[:end], data[end+1:]
		}
		start := off
		off += int64(len(text)) + 1
		lineNo := line
		line++
		if len(bytes.TrimSpace(text)) == 0 {
			continue
		}
		if d.fast != nil {
			err := d.fast.Text(text, &d.rec.Record)
			if err == nil {
				var r change.Row
				if r, err = d.finishFast(res.n + 1); err == nil {
					res.n++
					res.rows = append(res.rows, r)
					continue
				}
			}
			if !errors.Is(err, ionrec.ErrFallback) {
				res.n++
				var re *change.RecordError
				if errors.As(err, &re) {
					re.Line = lineNo
				}
				res.err = err
				return res, odd
			}
			d.fallbacks++
			if hazard(text) {
				odd = true
				if stopAtOdd {
					return res, odd
				}
			}
		}
		r := textReader(text)
		if err := res.decodeAll(d, r); err != nil {
			var re *change.RecordError
			if errors.As(err, &re) {
				re.Line = lineNo
			}
			res.err = locate(err, s.Offset+start)
			return res, odd
		}
		if err := r.Err(); err != nil {
			res.n++
			abs := s.Offset + start
			res.err = &change.RecordError{Record: res.n, Line: lineNo, Offset: ionOffset(err, abs), Err: malformedValue(adjustOffset(err, abs))}
			return res, odd || d.fast != nil
		}
	}
	return res, odd
}

// hazard reports text that may change how the next lines read: a long
// string (it concatenates with the next), a block comment, a symbol table
// or version marker.
func hazard(text []byte) bool {
	return bytes.Contains(text, []byte("'''")) || bytes.Contains(text, []byte("/*")) || bytes.Contains(text, []byte("$ion"))
}

// decodeStream decodes the whole file as one Ion stream, sequentially.
func decodeStream(ctx context.Context, path string, m *mapping.Mapping, sink func(change.Row) error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open batch file: %w", err)
	}
	defer f.Close()
	var in io.Reader = f
	var bad *batchfile.Unframed
	head := make([]byte, 4)
	n, _ := io.ReadFull(f, head)
	binary := batchfile.IsBinary(head[:n])
	if binary {
		// Never let ion-go read a value whose length runs past the file:
		// it allocates the declared length first.
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return fmt.Errorf("read batch file: %w", err)
		}
		limit, b, err := batchfile.ScanBinary(f)
		if err != nil {
			return err
		}
		in, bad = io.LimitReader(f, limit), b
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("read batch file: %w", err)
	}
	var r ion.Reader
	if binary {
		r = ion.NewReader(bufio.NewReaderSize(in, 1<<20))
	} else {
		r = &mendedReader{Reader: ion.NewReader(bufio.NewReaderSize(ionesc.NewReader(in), 1<<20)),
			text: func() io.Reader { return io.NewSectionReader(f, 0, math.MaxInt64) }}
	}
	d := newRecordDecoder(m)
	var rec int64
	for r.Next() {
		if isVersionSymbol(r) {
			continue
		}
		rec++
		if rec%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		row, err := d.decode(r, rec)
		if err != nil {
			return locate(err, 0)
		}
		if err := sink(row); err != nil {
			return err
		}
	}
	if err := r.Err(); err != nil {
		return &change.RecordError{Record: rec + 1, Offset: ionOffset(err, 0), Err: malformedValue(err)}
	}
	if bad != nil {
		return badRecord(rec+1, bad)
	}
	return nil
}

// isVersionSymbol reports a top-level $ion_1_0 in text, which ion-go
// returns as a symbol although it is the Ion version marker.
func isVersionSymbol(r ion.Reader) bool {
	if r.Type() != ion.SymbolType || r.IsNull() {
		return false
	}
	if as, _ := r.Annotations(); len(as) > 0 {
		return false
	}
	s, err := r.SymbolValue()
	return err == nil && s != nil && s.Text != nil && *s.Text == "$ion_1_0"
}
