package batchfile

import (
	"bytes"
	"runtime"
	"strings"
	"testing"

	"github.com/changesink/changesink/internal/iongen"
)

// event is a Kestra-shaped change event of the orders table.
func event(id int64, lsn int64) iongen.Struct {
	row := iongen.Struct{{"id", id}, {"customer_id", id * 3}, {"amount_cents", int64(500)}, {"status", "new"}}
	return iongen.Event(row, false, iongen.Metadata("UPDATE", iongen.Source("shop", "public", "orders", lsn, 700, "false")))
}

func encode(t testing.TB, binary bool, n int) []byte {
	t.Helper()
	var b bytes.Buffer
	w := iongen.NewWriter(&b, binary)
	for i := range n {
		if err := w.Write(event(int64(i+1), int64(100+i))); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

// TestBinaryCutsAtMarkers: every segment but the first starts where
// a row's version marker is, and segments hold segmentSize or a little more.
func TestBinaryCutsAtMarkers(t *testing.T) {
	data := encode(t, true, 5000)
	var segs []*Segment
	if err := NewSplitter(0).Binary(bytes.NewReader(data), func(s *Segment) error { segs = append(segs, s); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(segs) < 2 {
		t.Fatalf("%d bytes gave %d segments", len(data), len(segs))
	}
	for i, s := range segs {
		if !IsBinary(s.Data) || s.Bad != nil {
			t.Errorf("segment %d at %d does not start with a version marker (bad %v)", i, s.Offset, s.Bad)
		}
		if i < len(segs)-1 && (len(s.Data) < segmentSize || len(s.Data) > segmentSize+4096) {
			t.Errorf("segment %d holds %d bytes", i, len(s.Data))
		}
	}
}

// TestTextLines: segments are whole lines, numbered across segments.
func TestTextLines(t *testing.T) {
	data := encode(t, false, 5000)
	line := int64(1)
	var got []byte
	if err := NewSplitter(0).Text(bytes.NewReader(data), func(s *Segment) error {
		if s.FirstLine != line || s.Data[len(s.Data)-1] != '\n' {
			t.Errorf("segment at line %d (want %d) ends with %q", s.FirstLine, line, s.Data[len(s.Data)-1])
		}
		line += s.Lines
		got = append(got, s.Data...)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if line != 5001 || !bytes.Equal(got, data) {
		t.Errorf("lines %d, %d of %d bytes", line-1, len(got), len(data))
	}
}

// TestTextLongLine: a line longer than a segment (a huge value in a
// field the decoder skips) used to be re-copied for every MiB the splitter
// read: quadratic, a 100 MB line took 5.7 s and 490 MB RSS, a 200 MB line
// 19.5 s and 1.2 GB. The bytes the splitter allocates must stay linear in
// the input.
func TestTextLongLine(t *testing.T) {
	line := `{id:1,customer_id:1,amount_cents:1,status:"a",deleted:false,metadata:{foo:"` +
		strings.Repeat("x", 32<<20) + `",source:{db:"shop",schema:"public",table:"orders",lsn:7}}}` + "\n"
	input := line + `{id:2}` + "\n" + line
	var got []byte
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	err := NewSplitter(0).Text(strings.NewReader(input), func(s *Segment) error {
		got = append(got, s.Data...)
		return nil
	})
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != input {
		t.Fatalf("segments hold %d bytes, want the input's %d", len(got), len(input))
	}
	// got itself costs about 2x the input; the splitter may add about 4x.
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("split %d MiB in lines of %d MiB: %d MiB allocated", len(input)>>20, len(line)>>20, alloc>>20)
	if limit := uint64(8 * len(input)); alloc > limit {
		t.Errorf("splitting %d MiB allocated %d MiB (more than %d MiB: quadratic copying)", len(input)>>20, alloc>>20, limit>>20)
	}
}

// FuzzSplit: on any input the splitters lose no byte and keep offsets
// contiguous; Binary stops exactly at the value ScanBinary calls bad.
func FuzzSplit(f *testing.F) {
	for _, binary := range []bool{false, true} {
		f.Add(encode(f, binary, 3))
	}
	f.Add([]byte("{id:1,customer_id:"))
	f.Add([]byte{0xE0, 0x01, 0x00, 0xEA, 0xDE, 0x8F})
	f.Add([]byte{0xE0, 0x01, 0x00, 0xEA, 0xEE, 0xFF, 0xFF, 0xFF, 0x0F})
	f.Fuzz(func(t *testing.T, data []byte) {
		var got []byte
		end := int64(len(data))
		var bad *Unframed
		collect := func(s *Segment) error {
			if int64(len(got)) != s.Offset {
				t.Fatalf("segment at %d after %d bytes", s.Offset, len(got))
			}
			got = append(got, s.Data...)
			if s.Bad != nil {
				end, bad = s.Bad.Offset, s.Bad
			}
			return nil
		}
		err := NewSplitter(0).Binary(bytes.NewReader(data), collect)
		if err == nil && !bytes.Equal(got, data[:end]) {
			t.Fatalf("Binary lost bytes: %d of %d", len(got), end)
		}
		limit, sbad, serr := ScanBinary(bytes.NewReader(data))
		if serr != nil || (sbad == nil) != (limit == int64(len(data))) {
			t.Fatalf("ScanBinary: %d, %v, %v", limit, sbad, serr)
		}
		if err == nil && ((bad == nil) != (sbad == nil) || (bad != nil && (*bad != *sbad || limit != end))) {
			t.Fatalf("Binary stops at %v, ScanBinary at %d %v", bad, limit, sbad)
		}
		got = nil
		if err := NewSplitter(0).Text(bytes.NewReader(data), collect); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("Text: %v, %d of %d bytes", err, len(got), len(data))
		}
	})
}

// TestSplitterRecycles: with buffers handed back as soon as each segment
// is read, the segments hold the same bytes as without, in both forms, and
// the buffers are reused.
func TestSplitterRecycles(t *testing.T) {
	for _, binary := range []bool{false, true} {
		data := encode(t, binary, 8000)
		var plain, recycled [][]byte
		split := func(sp *Splitter, out *[][]byte) map[*byte]bool {
			bufs := map[*byte]bool{}
			emit := func(s *Segment) error {
				*out = append(*out, bytes.Clone(s.Data))
				bufs[&s.Data[:1][0]] = true
				sp.Recycle(s)
				return nil
			}
			var err error
			if binary {
				err = sp.Binary(bytes.NewReader(data), emit)
			} else {
				err = sp.Text(bytes.NewReader(data), emit)
			}
			if err != nil {
				t.Fatal(err)
			}
			return bufs
		}
		split(nil, &plain)
		bufs := split(NewSplitter(2), &recycled)
		if len(plain) < 3 || len(plain) != len(recycled) {
			t.Fatalf("binary %v: %d and %d segments", binary, len(plain), len(recycled))
		}
		for i := range plain {
			if !bytes.Equal(plain[i], recycled[i]) {
				t.Fatalf("binary %v: segment %d differs with recycled buffers", binary, i)
			}
		}
		if len(bufs) >= len(recycled) {
			t.Errorf("binary %v: %d buffers for %d segments: none reused", binary, len(bufs), len(recycled))
		}
	}
}
