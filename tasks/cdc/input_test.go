package cdc

// Tests of batch files that cannot be read as they are: a directory, text
// that is not UTF-8, a huge number.

import (
	"bytes"
	"context"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"

	"github.com/changesink/changesink/internal/iongen"
	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
)

// TestBatchFileIsADirectory: CDC_BATCH_FILE naming a directory was
// reported as transient (exit 3: "retry"), because outcome.Classify calls
// every errno a network error. No retry helps: it is a configuration error.
func TestBatchFileIsADirectory(t *testing.T) {
	m := loadMapping(t, ordersMapping)
	dir := filepath.Join(t.TempDir(), "changes.ion")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := testApply(context.Background(), offlineConfig(t, m, dir))
	wantError(t, err, outcome.Config, change.ErrConfig)
}

// TestMalformedBatchSaysWhatToDo: a batch cut short is refused, naming
// the record and byte, and Apply says what to do; ion-go's own words
// ("unexpected token '<EOF>'") do not.
func TestMalformedBatchSaysWhatToDo(t *testing.T) {
	m := loadMapping(t, ordersMapping)
	for _, f := range forms() {
		t.Run(f.name, func(t *testing.T) {
			data := encode(t, f.binary, orderEvent(1, int64(1), int64(1), "ok", int64(100), false),
				orderEvent(2, int64(1), int64(1), "cut", int64(101), false))
			path := filepath.Join(t.TempDir(), "changes.ion")
			testenv.WriteFile(t, path, data[:len(data)-5], 0o644)
			_, err := testApply(context.Background(), offlineConfig(t, m, path))
			wantError(t, err, outcome.Refused, change.ErrMalformed, "record 2 (", "byte ",
				"The batch file is cut short, corrupt or not Ion: replay an intact copy of the trigger's batch", "Nothing was written")
		})
	}
}

// TestByteOrderMark: a text batch an editor saved with a UTF-8 byte order
// mark was refused as "unexpected rune 'ï'"; the refusal names the mark.
func TestByteOrderMark(t *testing.T) {
	m := loadMapping(t, ordersMapping)
	data := encode(t, false, orderEvent(1, int64(1), int64(1), "ok", int64(100), false))
	path := filepath.Join(t.TempDir(), "changes.ion")
	testenv.WriteFile(t, path, append([]byte("\xEF\xBB\xBF"), data...), 0o644)
	_, err := testApply(context.Background(), offlineConfig(t, m, path))
	wantError(t, err, outcome.Refused, change.ErrMalformed, "record 1 (byte 0): malformed Ion: the file starts with a UTF-8 byte order mark (EF BB BF)",
		"save it without a byte order mark")
}

// TestInvalidUTF8Refused: an Ion string (or symbol) is Unicode text;
// bytes that are not UTF-8 mean a corrupt file. They were accepted, written
// to ClickHouse as raw bytes, and rendered as U+FFFD in expected.jsonl, so
// the output file no longer described what was stored. Both forms: ion-go's
// text and binary readers pass the bytes through unchecked.
func TestInvalidUTF8Refused(t *testing.T) {
	m := loadMapping(t, ordersMapping)
	for _, f := range forms() {
		for _, where := range []string{"string", "symbol"} {
			t.Run(f.name+"/"+where, func(t *testing.T) {
				// "QQQ" is a placeholder of the same length as the bad bytes.
				var status any = "aQQQb"
				if where == "symbol" {
					status = iongen.Symbol("aQQQb")
				}
				data := encode(t, f.binary,
					orderEvent(1, int64(1), int64(1), "ok", int64(100), false),
					orderEvent(2, int64(1), int64(1), status, int64(101), false))
				if bytes.Count(data, []byte("QQQ")) != 1 {
					t.Fatalf("placeholder not found once in %q", data)
				}
				data = bytes.Replace(data, []byte("QQQ"), []byte{0xFF, 0xC3, 0x28}, 1)
				b, err := decodeBytes(t, m, data, 2)
				if err == nil {
					t.Fatalf("a string that is not UTF-8 was accepted: %q", b.Sorted()[len(b.Sorted())-1].Vals[3].S)
				}
				var re *change.RecordError
				if !errors.As(err, &re) || re.Record != 2 {
					t.Fatalf("error does not name record 2: %v", err)
				}
				// ion-go refuses bad bytes in binary strings and symbols, and
				// a text symbol, before the value is read (byte offset named);
				// a text string reaches the decoder, which names the rest.
				if !f.binary && where == "string" && (re.Column != "status" || re.Key != "id=2" || re.LSN != 101 || re.Line != 2) {
					t.Errorf("error does not name line 2, key id=2, LSN 101, column status: %v", err)
				}
				if !errors.Is(err, change.ErrMalformed) {
					t.Errorf("not ErrMalformed: %v", err)
				}
				if k := outcome.Classify(markInput(err)); k != outcome.Refused {
					t.Errorf("class %v, want refused", k)
				}
				t.Log(err)
			})
		}
	}
}

// TestHugeNumberMessage: a number of 100,000 digits (no PostgreSQL
// column the mapping allows carries one, but a batch can) was printed whole
// in the refusal: one log line and one output of 100 KB or more (a
// 2,000,000-digit integer made a 2 MB line, and 14 s of printing). A
// refusal names the number by its first digits and its size.
func TestHugeNumberMessage(t *testing.T) {
	orders := loadMapping(t, ordersMapping)
	types := loadMapping(t, "testdata/types.mapping.yaml")
	digits := strings.Repeat("7", 100_000)
	withField := func(row iongen.Struct, name string, v any) iongen.Struct {
		out := append(iongen.Struct{}, row...)
		for i := range out {
			if out[i].Name == name {
				out[i].Value = v
			}
		}
		return out
	}
	huge, _ := new(big.Int).SetString(digits, 10)
	tests := []struct {
		name  string
		m     *mapping.Mapping
		event iongen.Struct
	}{
		{"int in Int64", orders, orderEvent(1, huge, int64(1), "x", int64(5), false)},
		{"decimal in Int64", orders, orderEvent(1, iongen.Decimal(digits+"."), int64(1), "x", int64(5), false)},
		{"fraction in Int64", orders, orderEvent(1, iongen.Decimal("1."+digits), int64(1), "x", int64(5), false)},
		{"int in UInt64", types, everythingEvent(withField(everythingRow(1, false), "u64", huge), 5)},
		{"decimal in Decimal", types, everythingEvent(withField(everythingRow(1, false), "price", iongen.Decimal(digits+".5")), 5)},
		{"places in Decimal", types, everythingEvent(withField(everythingRow(1, false), "price", iongen.Decimal("1."+digits)), 5)},
		{"LSN", orders, orderEvent(1, int64(1), int64(1), "x", huge, false)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, f := range forms() {
				_, err := decodeBytes(t, tt.m, encode(t, f.binary, tt.event), 1)
				if err == nil {
					t.Fatal("accepted")
				}
				if len(err.Error()) > 600 {
					t.Errorf("%s: a refusal of %d bytes: %.300s…", f.name, len(err.Error()), err)
				}
			}
		})
	}
}

// TestSurrogateEscapesApplied: a text batch whose status is written with
// a UTF-16 surrogate pair of \u escapes, "\ud83d\ude00", was stored in
// ClickHouse as two U+FFFD, and one with a lone surrogate as one U+FFFD,
// and the run exited 0. Now the pair is stored as the one character it
// encodes (read back from ClickHouse), and a lone surrogate is refused,
// naming record, line and escape, with nothing written.
//
//changesink:per-server
func TestSurrogateEscapesApplied(t *testing.T) {
	e := newEnv(t, ordersMapping)
	e.setup()
	batch := func(status string) string {
		data := encode(t, false, orderEvent(1, int64(1), int64(1), "ok", int64(100), false),
			orderEvent(2, int64(1), int64(1), "QQQ", int64(101), false))
		return writeFile(t, "changes.ion", bytes.Replace(data, []byte(`"QQQ"`), []byte(status), 1))
	}
	_, _, err := e.applyFile(batch(`"a\ud800b"`))
	wantError(t, err, outcome.Refused, change.ErrMalformed, "record 2 (line 2, byte ", `the escape \ud800 names no Unicode character`, "Nothing was written")
	if n := e.query("SELECT count() FROM " + e.db + ".orders_cdc"); n[0] != "0" {
		t.Fatalf("%s rows written by a refused batch", n[0])
	}
	if _, _, err := e.applyFile(batch(`"a\ud83d\ude00b"`)); err != nil {
		t.Fatal(err)
	}
	got := e.query("SELECT id, status FROM " + e.db + ".orders_cdc FINAL ORDER BY id")
	if want := []string{"1\tok", "2\ta😀b"}; strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("rows %q, want %q", got, want)
	}
}
