package decode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/merge"

	"github.com/changesink/changesink/internal/iongen"
	"github.com/changesink/changesink/internal/testenv"
	"github.com/changesink/changesink/tasks/cdc/internal/batchfile"
)

// FuzzDecode is the differential test of the decoder: on any input, the
// default decoder (ionrec where it can, ion-go where it cannot) and ion-go
// alone (the oracle) give the same rows, or both refuse with the same
// error, with the orders mapping and the all-types mapping, segment by
// segment (text as one segment and line by line, binary as batchfile cuts
// it) and for the whole file. Every failure is a *RecordError naming a
// record; every decoded row has one value per column and a key. It is
// seeded with the committed batches (the fixtures, and the Debezium
// harness's real batches when present) and the trigger's shapes.
func FuzzDecode(f *testing.F) {
	orders := loadMapping(f, ordersMapping)
	types := loadMapping(f, "../testdata/types_current.mapping.yaml")
	for _, binary := range []bool{false, true} {
		f.Add(encode(f, binary, orderEvent(1, int64(10), int64(500), "new", int64(100), false), orderEvent(1, nil, nil, nil, int64(101), true)))
		f.Add(encode(f, binary, everythingEvent(everythingRow(1, true), 5)))
		f.Add(encode(f, binary, iongen.Event(iongen.Struct{{"id", iongen.Struct{{"scale", int64(1)}, {"value", iongen.Blob{0xff}}}}}, false, iongen.Struct{})))
		f.Add(encode(f, binary, triggerBatch(20)...))
	}
	for _, p := range seedFiles(f) {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, status := range []string{`"a\ud83d\ude00b"`, `'\ud800'`, "'''\\udc00'''", `"\\ud800"`, `"\U00110000"`} {
		f.Add(bytes.Replace(encode(f, false, orderEvent(1, int64(10), int64(500), "QQQ", int64(100), false)), []byte(`"QQQ"`), []byte(status), 1))
	}
	f.Add([]byte("{id:1,customer_id:"))
	f.Add([]byte("$ion_1_0 {a:1}\n'''x\n'''\n"))
	f.Add([]byte{0xE0, 0x01, 0x00, 0xEA, 0xDE, 0x8F})
	f.Add([]byte{0xE0, 0x01, 0x00, 0xEA, 0xEE, 0xFF, 0xFF, 0xFF, 0x0F})
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, fmt.Sprintf("changes-%p.ion", &data))
		testenv.WriteFile(t, path, data, 0o644)
		defer os.Remove(path)
		for _, m := range []*mapping.Mapping{orders, types} {
			seg := &batchfile.Segment{Data: data, FirstLine: 1, Lines: int64(bytes.Count(data, []byte{'\n'}) + 1)}
			sameResults(t, m, located(m, Options{}, seg, false), located(m, Options{IonOnly: true}, seg, false))
			sameResults(t, m, decodeLines(newRecordDecoder(m), seg), decodeLines(newIonDecoder(m), seg))
			_ = batchfile.NewSplitter(0).Binary(bytes.NewReader(data), func(s *batchfile.Segment) error {
				sameResults(t, m, decodeSegment(newRecordDecoder(m), s, true), decodeSegment(newIonDecoder(m), s, true))
				return nil
			})
			got, gerr := decodeFileWith(context.Background(), path, m, decodeOptions{workers: 2})
			want, werr := decodeFileWith(context.Background(), path, m, decodeOptions{workers: 2, ionOnly: true})
			sameErrors(t, gerr, werr)
			if gerr == nil {
				sameBatches(t, got, want)
			}
		}
	})
}

// located decodes a segment as a worker and the merge do: a text refusal
// not yet located by line is located by decodeLines.
func located(m *mapping.Mapping, opts Options, s *batchfile.Segment, binary bool) segResult {
	res := decodeSegment(opts.decoder(m), s, binary)
	if res.err != nil && !binary && !res.lined {
		res = decodeLines(opts.decoder(m), s)
	}
	return res
}

func sameResults(t *testing.T, m *mapping.Mapping, got, want segResult) {
	t.Helper()
	checkResult(t, m, got)
	sameErrors(t, got.err, want.err)
	if got.n != want.n || len(got.rows) != len(want.rows) || (len(got.rows) > 0 && !reflect.DeepEqual(got.rows, want.rows)) {
		t.Fatalf("records %d, rows\n%+v\nion-go: records %d, rows\n%+v", got.n, got.rows, want.n, want.rows)
	}
}

func checkResult(t *testing.T, m *mapping.Mapping, res segResult) {
	t.Helper()
	b := merge.NewBatch(m)
	for _, r := range res.rows {
		if len(r.Vals) != len(m.Cols) || r.Key == "" || r.Version == 0 {
			t.Fatalf("bad row %+v", r)
		}
		if err := b.Add(r); err != nil {
			var re *change.RecordError
			// The merge's own refusals: equal versions that differ, and
			// events that contradict each other (two lsn_commit values in a
			// transaction, a commit floor going down, a floor tie out of
			// LSN order) or a key change it cannot follow.
			if !errors.As(err, &re) || !(errors.Is(err, change.ErrConflict) || errors.Is(err, change.ErrContradiction) || errors.Is(err, change.ErrKeyChange)) {
				t.Fatalf("merge error %T %v", err, err)
			}
		}
		_ = change.AppendJSON(nil, m, &r)
	}
	if res.err != nil {
		var re *change.RecordError
		if !errors.As(res.err, &re) || re.Record < 1 || re.Err == nil {
			t.Fatalf("error %T %v does not name a record", res.err, res.err)
		}
		_ = res.err.Error()
	}
}

// refusals are the sentinels a decode may refuse with.
var refusals = []error{change.ErrEmptyBatch, change.ErrMalformed, change.ErrNotStruct, change.ErrSourceChanged, change.ErrWrongSource, change.ErrMissingField,
	change.ErrBadLSN, change.ErrBadTxID, change.ErrBadDeleteMarker, change.ErrBadValue, change.ErrToast, change.ErrContradiction, change.ErrKeyChange, change.ErrConflict}

// sameErrors: both nil, or the same message and class.
func sameErrors(t *testing.T, got, want error) {
	t.Helper()
	if (got == nil) != (want == nil) {
		t.Fatalf("error %v, ion-go %v", got, want)
	}
	if got == nil {
		return
	}
	for _, s := range refusals {
		if errors.Is(got, s) != errors.Is(want, s) {
			t.Fatalf("error %v, ion-go %v: not the same class (%v)", got, want, s)
		}
	}
	if got.Error() != want.Error() {
		t.Fatalf("error\n %v\nion-go\n %v", got, want)
	}
}

func sameBatches(t *testing.T, got, want *merge.Batch) {
	t.Helper()
	if got.Events != want.Events || len(got.Sorted()) != len(want.Sorted()) || jsonLines(got) != jsonLines(want) ||
		!reflect.DeepEqual(got.OutOfOrder, want.OutOfOrder) {
		t.Fatalf("%d events, %d keys\n%s\nion-go: %d events, %d keys\n%s", got.Events, len(got.Sorted()), jsonLines(got),
			want.Events, len(want.Sorted()), jsonLines(want))
	}
	gs, ws := got.Sorted(), want.Sorted()
	for i := range gs {
		if !reflect.DeepEqual(*gs[i], *ws[i]) {
			t.Fatalf("row %d (in key order)\n%+v\nion-go\n%+v", i, *gs[i], *ws[i])
		}
	}
}

// seedFiles are the committed batch files: the fixtures, and the Debezium
// harness's real batches under testdata/debezium when present.
func seedFiles(t testing.TB) []string {
	t.Helper()
	var paths []string
	for _, pattern := range []string{"../testdata/*.ion", "../testdata/debezium/*/*.ion"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range m {
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && filepath.Ext(p) != ".jsonl" {
				paths = append(paths, p)
			}
		}
	}
	return paths
}

// triggerBatch is n events of shop.public.orders as the Kestra 2.0 trigger
// writes them (harness/debezium/FINDINGS.md §1): NULL columns left out,
// deletes carrying only the key, metadata {source, ts_ns, operation, ts_us,
// timestamp}.
func triggerBatch(n int) []any {
	statuses := []string{"new", "paid", "shipped", "en préparation", "返品", `say "hi"`, "tab\there"}
	var out []any
	for i := range n {
		id := int64(i%(n/2+1) + 1)
		lsn := int64(24023128 + 56*i)
		op, deleted := "UPDATE", false
		row := iongen.Struct{{"id", id}, {"customer_id", int64(100 + i)}, {"amount_cents", int64(i*37 - 500)}, {"status", statuses[i%len(statuses)]}}
		switch {
		case i%9 == 8:
			op, deleted = "DELETE", true
			row = iongen.Struct{{"id", id}}
		case i < n/2:
			op = "CREATE"
		}
		snapshot := "false"
		if i == 0 {
			snapshot = "first"
		}
		src := iongen.TriggerSource("shop", "public", "orders", lsn, int64(770+i/4), snapshot)
		for k := range src { // one lsn_commit for the 4 events of a transaction, as Debezium writes it
			if src[k].Name == "sequence" {
				src[k].Value = fmt.Sprintf(`["%d","%d"]`, 24023128+56*(i/4*4)-56, lsn)
			}
		}
		out = append(out, iongen.TriggerEvent(row, deleted, iongen.TriggerMetadata(op, src)))
	}
	return out
}

// everythingRow is a row image of the types mappings with every Debezium
// shape: ints, a UInt64 beyond int64, a float4 widened to a double, a
// float8, decimals (12.50), an unconstrained numeric as {scale, value}, a
// bool, a day timestamp, a millisecond timestamp, annotated ZonedDateTime
// and LocalDateTime strings, a UUID, nulls and a blob.
func everythingRow(id int64, current bool) iongen.Struct {
	two64m1 := new(big.Int).SetUint64(math.MaxUint64)
	row := iongen.Struct{
		{"id", id}, {"code", "A-1"},
		{"i8", int64(-128)}, {"i16", int64(32767)}, {"i32", int64(-2147483648)},
		{"u8", int64(255)}, {"u16", int64(65535)}, {"u32", int64(4294967295)}, {"u64", two64m1},
		{"f32", 3.200000047683716}, {"f64", 1.0e-7},
		{"price", iongen.Decimal("12.50")}, {"big", iongen.Decimal("123456789012345678.0123456789")},
		{"var_num", iongen.Struct{{"scale", int64(2)}, {"value", iongen.Blob{0xFB, 0x1E}}}}, // -1250 → -12.50
		{"flag", true}, {"day", iongen.Day(2024, 1, 15)},
		{"at", iongen.Millis(time.Date(2024, 1, 15, 10, 30, 0, 0, time.UTC))},
		{"uid", "6F1C7A3E-2B4D-4C8E-9F10-112233445566"},
		{"note", nil}, {"qty", iongen.Null(0x2)}, {"payload", iongen.Blob("\x00\xffbin")},
	}
	if current {
		row[16] = iongen.Field{"at", iongen.Millis(time.Date(2024, 1, 15, 10, 30, 0, 123_000_000, time.UTC))}
		row = append(row[:17], append(iongen.Struct{
			{"zoned", iongen.Annotated{"ZonedDateTime", "2024-01-15T10:30:00.123456Z"}},
			{"local", iongen.Annotated{"LocalDateTime", "2024-01-15T10:30:00.654321"}},
		}, row[17:]...)...)
	}
	return row
}

func everythingEvent(row iongen.Struct, lsn int64) iongen.Struct {
	return iongen.Event(row, false, iongen.Metadata("UPDATE", iongen.Source("shop", "public", "everything", lsn, 9, "false")))
}
