package ionrec

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/changesink/changesink/tasks/cdc/internal/batchfile"
)

// seedBatches are the batch files committed under cdc's testdata (the
// fixtures and the Debezium harness's real batches, when present).
func seedBatches(f *testing.F) (text, binary [][]byte) {
	f.Helper()
	var paths []string
	for _, pattern := range []string{"../../testdata/*.ion", "../../testdata/debezium/*/*.ion"} {
		m, _ := filepath.Glob(pattern)
		paths = append(paths, m...)
	}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil || len(data) == 0 {
			continue
		}
		if batchfile.IsBinary(data) {
			binary = append(binary, data)
		} else {
			text = append(text, data)
		}
	}
	return text, binary
}

// FuzzText: what the text reader accepts, ion-go reads as the same record.
func FuzzText(f *testing.F) {
	text, _ := seedBatches(f)
	for _, data := range text {
		for line := range bytes.SplitSeq(data, []byte("\n")) {
			f.Add(line)
		}
	}
	for _, line := range encodeEach(f, false, triggerEvents()) {
		f.Add(line)
		for _, status := range []string{`"a\ud83d\ude00b"`, `"\ud800"`, `"\\\udbff\udfff"`, `"\U0010FFFF"`} {
			f.Add(bytes.Replace(line, []byte(`"new"`), []byte(status), 1))
		}
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		if bytes.IndexByte(line, '\n') >= 0 {
			return // the caller splits lines
		}
		got, err := readFast(false, line)
		if err != nil {
			if !errors.Is(err, ErrFallback) {
				t.Fatalf("an error other than ErrFallback: %v", err)
			}
			return
		}
		want, err := readRef(false, line)
		if err != nil {
			t.Fatalf("read %q, which ion-go refuses: %v", line, err)
		}
		if diff := compareRecords(got, want); diff != "" {
			t.Fatalf("%q: %s", line, diff)
		}
	})
}

// FuzzBinary: on framed binary input (as batchfile cuts it), the records
// the binary reader yields before it stops are the records ion-go reads,
// and when it reads a whole chunk, ion-go reads that chunk to the end.
func FuzzBinary(f *testing.F) {
	_, binary := seedBatches(f)
	for _, data := range binary {
		f.Add(data)
	}
	for _, c := range encodeEach(f, true, triggerEvents()) {
		f.Add(c)
		f.Add(pad(f, c))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_ = batchfile.NewSplitter(0).Binary(bytes.NewReader(data), func(s *batchfile.Segment) error {
			for seg := s.Data; len(seg) > 0; {
				n := NextChunk(seg)
				chunk := seg[:n]
				seg = seg[n:]
				r := NewReader(orders)
				var got []*Record
				err := r.Binary(chunk, NewRecord(&orders), func(rec *Record) error {
					got = append(got, cloneRecord(rec))
					return nil
				})
				if err != nil && !errors.Is(err, ErrFallback) {
					t.Fatalf("an error other than ErrFallback: %v", err)
				}
				want, rerr := readRef(true, chunk)
				switch {
				case err == nil && rerr != nil:
					t.Fatalf("read % x, which ion-go refuses: %v", chunk, rerr)
				case len(got) > len(want):
					t.Fatalf("% x: %d records read, ion-go reads %d before %v", chunk, len(got), len(want), rerr)
				}
				if diff := compareRecords(got, want[:len(got)]); diff != "" {
					t.Fatalf("% x: %s", chunk, diff)
				}
				if err == nil && len(got) != len(want) {
					t.Fatalf("% x: %d records read, ion-go reads %d", chunk, len(got), len(want))
				}
			}
			return nil
		})
	})
}
