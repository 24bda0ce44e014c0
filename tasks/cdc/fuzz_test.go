package cdc

import (
	"bytes"
	"errors"
	"testing"

	"github.com/changesink/changesink/tasks/cdc/internal/batchfile"
	"github.com/changesink/changesink/tasks/cdc/internal/iongen"
)

// FuzzDecode feeds arbitrary bytes to every decoding path (segment stream,
// line by line, binary segments as batchfile cuts them) and the merge, with
// the orders mapping and the all-types mapping. Invariants: no panic; every
// failure is a *RecordError naming a record; every decoded row has one
// value per column and a key. (The splitters' own invariants are
// batchfile's FuzzSplit.)
func FuzzDecode(f *testing.F) {
	orders := loadMapping(f, ordersMapping)
	types := loadMapping(f, "testdata/types_current.mapping.yaml")
	for _, binary := range []bool{false, true} {
		f.Add(encode(f, binary, orderEvent(1, int64(10), int64(500), "new", int64(100), false), orderEvent(1, nil, nil, nil, int64(101), true)))
		f.Add(encode(f, binary, everythingEvent(everythingRow(1, true), 5)))
		f.Add(encode(f, binary, iongen.Event(iongen.Struct{{"id", iongen.Struct{{"scale", int64(1)}, {"value", iongen.Blob{0xff}}}}}, false, iongen.Struct{})))
	}
	f.Add([]byte("{id:1,customer_id:"))
	f.Add([]byte("$ion_1_0 {a:1}\n'''x\n'''\n"))
	f.Add([]byte{0xE0, 0x01, 0x00, 0xEA, 0xDE, 0x8F})
	f.Add([]byte{0xE0, 0x01, 0x00, 0xEA, 0xEE, 0xFF, 0xFF, 0xFF, 0x0F})
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, m := range []*Mapping{orders, types} {
			seg := &batchfile.Segment{Data: data, FirstLine: 1, Lines: int64(bytes.Count(data, []byte{'\n'}) + 1)}
			for _, res := range []segResult{decodeSegment(newRecordDecoder(m), seg, false), decodeLines(newRecordDecoder(m), seg)} {
				checkResult(t, m, res)
			}
			// Binary segments as the splitter cuts them.
			_ = batchfile.SplitBinary(bytes.NewReader(data), func(s *batchfile.Segment) error {
				checkResult(t, m, decodeSegment(newRecordDecoder(m), s, true))
				return nil
			})
		}
	})
}

func checkResult(t *testing.T, m *Mapping, res segResult) {
	t.Helper()
	b := newBatch(m)
	for _, r := range res.rows {
		if len(r.vals) != len(m.cols) || r.key == "" || r.lsn == 0 {
			t.Fatalf("bad row %+v", r)
		}
		if err := b.add(r); err != nil {
			var re *RecordError
			if !errors.As(err, &re) || !errors.Is(err, ErrConflict) {
				t.Fatalf("merge error %T %v", err, err)
			}
		}
		_ = appendJSONRow(nil, m, &r)
	}
	if res.err != nil {
		var re *RecordError
		if !errors.As(res.err, &re) || re.Record < 1 || re.Err == nil {
			t.Fatalf("error %T %v does not name a record", res.err, res.err)
		}
		_ = res.err.Error()
	}
}
