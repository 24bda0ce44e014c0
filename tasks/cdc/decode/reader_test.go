package decode

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/merge"

	"github.com/changesink/changesink/internal/testenv"
	"github.com/changesink/changesink/tasks/cdc/internal/batchfile"
)

// TestDecodeSegmentsMatchStream decodes a batch of several segments with one
// and with several workers, and as one stream, and compares the results,
// then checks that a fault deep in the file is reported with the same
// record number by every path.
func TestDecodeSegmentsMatchStream(t *testing.T) {
	m := loadMapping(t, ordersMapping)
	var events []any
	for i := range 12000 {
		id := int64(i%5000 + 1)
		events = append(events, orderEvent(id, int64(i), int64(i*3), fmt.Sprintf("status-%d", i%7), int64(1000+i), i%10 == 9))
	}
	for _, f := range forms() {
		t.Run(f.name, func(t *testing.T) {
			data := encode(t, f.binary, events...)
			split, segments := batchfile.NewSplitter(0).Text, 0
			if f.binary {
				split = batchfile.NewSplitter(0).Binary
			}
			if err := split(bytes.NewReader(data), func(*batchfile.Segment) error { segments++; return nil }); err != nil || segments < 3 {
				t.Fatalf("batch of %d bytes cut into %d segments (%v): too few to span segments", len(data), segments, err)
			}
			path := writeFile(t, "changes.ion", data)
			one, err := decodeFile(context.Background(), path, m, 1)
			if err != nil {
				t.Fatal(err)
			}
			many, err := decodeFile(context.Background(), path, m, 4)
			if err != nil {
				t.Fatal(err)
			}
			stream := merge.NewBatch(m)
			if err := decodeStream(context.Background(), path, m, stream.Add); err != nil {
				t.Fatal(err)
			}
			if one.Events != 12000 || len(one.Sorted()) != 5000 {
				t.Errorf("events=%d keys=%d", one.Events, len(one.Sorted()))
			}
			a, b, c := jsonLines(one), jsonLines(many), jsonLines(stream)
			if a != b || a != c {
				t.Error("segment decode differs from the stream decode")
			}

			bad := append([]any{}, events...)
			bad[10500] = orderEvent(77, int64(1), int64(2), strings.Repeat("x", 40), int64(5), false)
			badPath := writeFile(t, "bad.ion", encode(t, f.binary, bad...))
			_, err1 := decodeFile(context.Background(), badPath, m, 3)
			err2 := decodeStream(context.Background(), badPath, m, merge.NewBatch(m).Add)
			var re1, re2 *change.RecordError
			if !errors.As(err1, &re1) || !errors.As(err2, &re2) || re1.Record != 10501 || re2.Record != 10501 {
				t.Fatalf("segment error %v, stream error %v; want record 10501", err1, err2)
			}
			if !f.binary && re1.Line != 10501 {
				t.Errorf("line = %d, want 10501", re1.Line)
			}
		})
	}
}

// TestDecodeSegmentsStopsItsGoroutines: when the merge stops at a refusal
// in the first segment, decodeSegments returns only after the splitter and
// every worker have stopped, so that the one-stream fallback (or the next
// pass) never reads the file beside them.
func TestDecodeSegmentsStopsItsGoroutines(t *testing.T) {
	m := loadMapping(t, ordersMapping)
	var events []any
	for i := range 12000 {
		events = append(events, orderEvent(int64(i+1), int64(i), int64(i*3), "x", int64(1000+i), false))
	}
	for _, f := range forms() {
		t.Run(f.name, func(t *testing.T) {
			path := writeFile(t, "changes.ion", encode(t, f.binary, events...))
			before := runtime.NumGoroutine()
			refuse := errors.New("stop at the first row")
			err := decodeSegments(context.Background(), path, m, Options{Workers: 4}, f.binary, func(change.Row) error { return refuse })
			if !errors.Is(err, refuse) {
				t.Fatalf("err = %v", err)
			}
			// A goroutine that has returned (errgroup's Wait saw it done) is
			// still counted until the scheduler retires it: give it a moment,
			// a leaked one stays blocked for good.
			after := runtime.NumGoroutine()
			for n := 0; after > before && n < 200; n++ {
				time.Sleep(5 * time.Millisecond)
				after = runtime.NumGoroutine()
			}
			if after > before {
				t.Errorf("%d goroutines still running after decodeSegments returned (%d before)", after-before, before)
			}
		})
	}
}

// TestTriggerShapesDecodeFast: the records Kestra writes never reach
// ion-go, in either form (a fallback would cost ion-go's speed, not
// correctness).
func TestTriggerShapesDecodeFast(t *testing.T) {
	m := loadMapping(t, ordersMapping)
	for _, f := range forms() {
		t.Run(f.name, func(t *testing.T) {
			data := encode(t, f.binary, triggerBatch(3000)...)
			d := newRecordDecoder(m)
			seg := &batchfile.Segment{Data: data, FirstLine: 1, Lines: int64(bytes.Count(data, []byte{'\n'}))}
			res := decodeSegment(d, seg, f.binary)
			if res.err != nil || res.n != 3000 {
				t.Fatalf("%d records, %v", res.n, res.err)
			}
			if d.fallbacks != 0 {
				t.Errorf("%d records went to ion-go", d.fallbacks)
			}
			last := res.rows[len(res.rows)-1].Meta
			last.Sum = 0
			lsn := uint64(24023128 + 56*2999) // its transaction's lsn_commit is its first event's LSN - 56 (triggerBatch)
			if want := (change.Meta{Op: "UPDATE", TxID: 770 + 2999/4, TxIDSet: true, DeletedSet: true, LSN: lsn, Commit: uint64(24023128 + 56*(2999/4*4) - 56), CommitSet: true, Sequenced: true, Snapshot: "false"}); last != want {
				t.Errorf("change of the last record %+v, want %+v", last, want)
			}
		})
	}
}

// TestRealBatchesDecodeFast decodes every real Debezium batch (testdata/
// debezium, captured by harness/debezium) in both forms with the default
// decoder: the records keep the manifest's operation, LSN, txId, snapshot
// and sequence as read, and none reaches ion-go.
func TestRealBatchesDecodeFast(t *testing.T) {
	manifests, err := filepath.Glob("../testdata/debezium/*/manifest.json")
	if err != nil || len(manifests) == 0 {
		t.Fatalf("no real batches under testdata/debezium: %v", err)
	}
	letter := map[string]string{"CREATE": "c", "UPDATE": "u", "DELETE": "d", "READ": "r", "TRUNCATE": "t"}
	for _, mf := range manifests {
		dir := filepath.Dir(mf)
		var manifest struct {
			Evaluations []struct {
				Batch   string   `json:"batch"`
				Changes []string `json:"changes"`
			} `json:"evaluations"`
		}
		raw := testenv.ReadFile(t, mf)
		if err := json.Unmarshal(raw, &manifest); err != nil {
			t.Fatal(err)
		}
		m := loadMapping(t, filepath.Join(dir, "mapping.yaml"))
		for _, ev := range manifest.Evaluations {
			if ev.Batch == "" {
				continue
			}
			for _, f := range forms() {
				name := filepath.Join(dir, ev.Batch+"."+f.name+".ion")
				t.Run(name, func(t *testing.T) {
					data := testenv.ReadFile(t, name)
					d := newRecordDecoder(m)
					res := decodeSegment(d, &batchfile.Segment{Data: data, FirstLine: 1, Lines: int64(bytes.Count(data, []byte{'\n'}))}, f.binary)
					if res.err == nil && len(res.rows) != len(ev.Changes) {
						t.Fatalf("%d records, the manifest lists %d changes", len(res.rows), len(ev.Changes))
					}
					for i, r := range res.rows {
						c := r.Meta
						// The snapshot marker is not kept (a READ without lsn_commit is a
						// snapshot row, order.go); the sequence is kept parsed.
						commit := "null"
						if c.CommitSet {
							commit = fmt.Sprintf("%q", fmt.Sprint(c.Commit))
						}
						want := regexp.MustCompile(` snapshot=\S+`).ReplaceAllString(ev.Changes[i], "")
						got := fmt.Sprintf("op=%s lsn=%d txId=%d sequence=[%s,%q]", letter[c.Op], c.LSN, c.TxID, commit, fmt.Sprint(c.LSN))
						if !c.TxIDSet || !c.DeletedSet || got != want {
							t.Errorf("record %d: %s (txId set %v, deleted set %v), the manifest says %s", i+1, got, c.TxIDSet, c.DeletedSet, ev.Changes[i])
						}
					}
					if d.fallbacks > 0 {
						t.Errorf("%d records went to ion-go", d.fallbacks)
					}
				})
			}
		}
	}
}
