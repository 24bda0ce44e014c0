package cdc

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
	"strings"
	"testing"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/merge"

	"github.com/changesink/changesink/internal/iongen"
	"github.com/changesink/changesink/internal/outcome"
)

// jsonLines renders a batch's latest rows as expected.jsonl.
func jsonLines(b *merge.Batch) string {
	var out []byte
	for _, r := range b.Sorted() {
		out = change.AppendJSON(out, b.M, r)
		out = append(out, '\n')
	}
	return string(out)
}

func TestDecodeOrders(t *testing.T) {
	m := loadMapping(t, ordersMapping)
	events := []any{
		orderEvent(2, int64(20), int64(1250), "paid", int64(100), false),
		orderEvent(1, int64(10), int64(500), "new", int64(101), false),
		orderEvent(2, int64(20), int64(1300), "shipped", int64(105), false),
		orderEvent(1, int64(10), int64(500), "new", int64(101), false), // an exact replay: allowed
		orderEvent(3, nil, nil, nil, int64(106), true),                 // a delete under REPLICA IDENTITY DEFAULT
		orderEvent(2, int64(20), int64(1250), "paid", int64(100), false),
		// No deleted field (false, like event.get("deleted", False)), a snapshot READ.
		iongen.Struct{{"id", int64(4)}, {"customer_id", int64(40)}, {"amount_cents", int64(7)},
			{"status", "ünïcødé \"✓\"\n"}, {"metadata", iongen.Metadata("READ", iongen.Source("shop", "public", "orders", int64(107), 701, "true"))}},
	}
	want := `{"id": 1, "customer_id": 10, "amount_cents": 500, "status": "new", "_cdc_lsn": 101, "_cdc_deleted": 0}
{"id": 2, "customer_id": 20, "amount_cents": 1300, "status": "shipped", "_cdc_lsn": 105, "_cdc_deleted": 0}
{"id": 3, "customer_id": 0, "amount_cents": 0, "status": "", "_cdc_lsn": 106, "_cdc_deleted": 1}
{"id": 4, "customer_id": 40, "amount_cents": 7, "status": "ünïcødé \"✓\"\n", "_cdc_lsn": 107, "_cdc_deleted": 0}
`
	for _, f := range forms() {
		t.Run(f.name, func(t *testing.T) {
			b, err := decodeBytes(t, m, encode(t, f.binary, events...), 2)
			if err != nil {
				t.Fatal(err)
			}
			if b.Events != 7 || len(b.Sorted()) != 4 {
				t.Errorf("events=%d keys=%d, want 7 and 4", b.Events, len(b.Sorted()))
			}
			if got := jsonLines(b); got != want {
				t.Errorf("expected.jsonl\n got %s\nwant %s", got, want)
			}
		})
	}
}

// refusal is one bad batch and the error it must produce.
type refusal struct {
	name   string
	events []any
	is     error
	want   string // the whole message
}

func ordersRefusals() []refusal {
	src := func(db, schema, table string, lsn any) iongen.Struct {
		return iongen.Metadata("UPDATE", iongen.Source(db, schema, table, lsn, 1, "false"))
	}
	ok := orderEvent(1, int64(10), int64(500), "new", int64(100), false)
	two64 := new(big.Int).Lsh(big.NewInt(1), 64)
	long := strings.Repeat("é", 33)
	return []refusal{
		{"unknown column", []any{ok, iongen.Event(append(orderRow(2, int64(1), int64(2), "x"), iongen.Field{"note", "n"}), false, src("shop", "public", "orders", int64(101)))},
			change.ErrSourceChanged, `record 2 (key id=2, LSN 101), column "note": source columns changed; update the mapping before continuing: column "note" is not in the mapping ../../flows/orders.mapping.yaml`},
		{"wrong table", []any{iongen.Event(orderRow(2, int64(1), int64(2), "x"), false, src("shop", "public", "customers", int64(101)))},
			change.ErrWrongSource, `record 1 (key id=2, LSN 101): change from another source table: expected changes from public.orders in database shop, got public.customers in database shop`},
		{"wrong database", []any{iongen.Event(orderRow(2, int64(1), int64(2), "x"), false, src("shop_test", "public", "orders", int64(101)))},
			change.ErrWrongSource, `record 1 (key id=2, LSN 101): change from another source table: expected changes from public.orders in database shop, got public.orders in database shop_test`},
		{"no metadata", []any{orderRow(2, int64(1), int64(2), "x")},
			change.ErrNotTriggerBatch, `record 1 (key id=2), column "metadata": missing field: not a batch of Kestra's Debezium trigger with metadata: no "metadata" field`},
		{"not a trigger batch", []any{iongen.Struct{{"not", "a change event"}, {"id", int64(2)}}},
			change.ErrNotTriggerBatch, `record 1 (key id=2), column "metadata": missing field: not a batch of Kestra's Debezium trigger with metadata: ` +
				`no "metadata" field, and a field "not" the mapping ../../flows/orders.mapping.yaml does not know`},
		{"no source", []any{iongen.Event(orderRow(2, int64(1), int64(2), "x"), false, iongen.Struct{{"operation", "UPDATE"}})},
			change.ErrMissingField, `record 1 (key id=2), column "metadata.source": missing field: no metadata.source struct`},
		{"no lsn", []any{iongen.Event(orderRow(2, int64(1), int64(2), "x"), false, iongen.Metadata("UPDATE", iongen.Struct{{"db", "shop"}, {"schema", "public"}, {"table", "orders"}}))},
			change.ErrMissingField, `record 1 (key id=2), column "metadata.source.lsn": missing field: no metadata.source.lsn`},
		{"lsn zero", []any{orderEvent(2, int64(1), int64(2), "x", int64(0), false)},
			change.ErrBadLSN, `record 1 (key id=2), column "metadata.source.lsn": invalid source LSN: 0 is outside 1..18446744073709551615`},
		{"lsn 2^64", []any{orderEvent(2, int64(1), int64(2), "x", two64, false)},
			change.ErrBadLSN, `record 1 (key id=2), column "metadata.source.lsn": invalid source LSN: 18446744073709551616 is outside 1..18446744073709551615`},
		{"lsn string", []any{orderEvent(2, int64(1), int64(2), "x", "24023128", false)},
			change.ErrBadLSN, `record 1 (key id=2), column "metadata.source.lsn": invalid source LSN: expected an Ion int, got an Ion string`},
		{"lsn bool", []any{orderEvent(2, int64(1), int64(2), "x", true, false)},
			change.ErrBadLSN, `record 1 (key id=2), column "metadata.source.lsn": invalid source LSN: expected an Ion int, got an Ion bool`},
		{"txId string", []any{withSource(orderEvent(2, int64(1), int64(2), "x", int64(101), false), "txId", "700")},
			change.ErrBadTxID, `record 1 (key id=2, LSN 101), column "metadata.source.txId": invalid source transaction id: expected an Ion int, got an Ion string`},
		{"txId decimal", []any{withSource(orderEvent(2, int64(1), int64(2), "x", int64(101), false), "txId", iongen.Decimal("700."))},
			change.ErrBadTxID, `record 1 (key id=2, LSN 101), column "metadata.source.txId": invalid source transaction id: expected an Ion int, got an Ion decimal`},
		{"txId negative", []any{withSource(orderEvent(2, int64(1), int64(2), "x", int64(101), false), "txId", int64(-700))},
			change.ErrBadTxID, `record 1 (key id=2, LSN 101), column "metadata.source.txId": invalid source transaction id: -700 is outside 0..9223372036854775807`},
		{"txId 2^64", []any{withSource(orderEvent(2, int64(1), int64(2), "x", int64(101), false), "txId", two64)},
			change.ErrBadTxID, `record 1 (key id=2, LSN 101), column "metadata.source.txId": invalid source transaction id: 18446744073709551616 is outside 0..9223372036854775807`},
		{"key missing", []any{iongen.Event(iongen.Struct{{"customer_id", int64(1)}, {"amount_cents", int64(2)}, {"status", "x"}}, false, src("shop", "public", "orders", int64(5)))},
			change.ErrMissingField, `record 1 (LSN 5), column "id": missing field: key column "id" is absent`},
		{"key bool", []any{iongen.Event(iongen.Struct{{"id", true}, {"customer_id", int64(1)}, {"amount_cents", int64(2)}, {"status", "x"}}, false, src("shop", "public", "orders", int64(5)))},
			change.ErrBadValue, `record 1 (LSN 5), column "id": value does not fit its column: expected an Ion int (or a decimal without fraction digits, 5.) for Int64, got an Ion bool`},
		{"key null", []any{iongen.Event(iongen.Struct{{"id", nil}, {"customer_id", int64(1)}, {"amount_cents", int64(2)}, {"status", "x"}}, false, src("shop", "public", "orders", int64(5)))},
			change.ErrBadValue, `record 1 (LSN 5), column "id": value does not fit its column: null in a column that is not Nullable (Int64)`},
		{"int out of range", []any{orderEvent(2, new(big.Int).Lsh(big.NewInt(1), 63), int64(2), "x", int64(9), false)},
			change.ErrBadValue, `record 1 (key id=2, LSN 9), column "customer_id": value does not fit its column: 9223372036854775808 is out of range for Int64`},
		{"int as decimal", []any{orderEvent(2, int64(1), iongen.Decimal("12.50"), "x", int64(9), false)},
			change.ErrBadValue, `record 1 (key id=2, LSN 9), column "amount_cents": value does not fit its column: expected an Ion int for Int64, got the decimal 12.50`},
		{"int as decimal 5.0", []any{orderEvent(2, int64(1), iongen.Decimal("5.0"), "x", int64(9), false)},
			change.ErrBadValue, `record 1 (key id=2, LSN 9), column "amount_cents": value does not fit its column: expected an Ion int for Int64, got the decimal 5.0`},
		{"int as bool", []any{orderEvent(2, false, int64(2), "x", int64(9), false)},
			change.ErrBadValue, `record 1 (key id=2, LSN 9), column "customer_id": value does not fit its column: expected an Ion int (or a decimal without fraction digits, 5.) for Int64, got an Ion bool`},
		{"status too long", []any{orderEvent(2, int64(1), int64(2), long, int64(9), false)},
			change.ErrBadValue, `record 1 (key id=2, LSN 9), column "status": value does not fit its column: 33 characters exceed max_length 32`},
		{"status not a string", []any{orderEvent(2, int64(1), int64(2), int64(7), int64(9), false)},
			change.ErrBadValue, `record 1 (key id=2, LSN 9), column "status": value does not fit its column: expected an Ion string, symbol or blob for String, got an Ion int`},
		{"status null", []any{orderEvent(2, int64(1), int64(2), nil, int64(9), false)},
			change.ErrBadValue, `record 1 (key id=2, LSN 9), column "status": value does not fit its column: null in a column that is not Nullable (String)`},
		{"missing column", []any{iongen.Event(iongen.Struct{{"id", int64(2)}, {"customer_id", int64(1)}, {"status", "x"}}, false, src("shop", "public", "orders", int64(5)))},
			change.ErrNotNullable, `record 1 (key id=2, LSN 5), column "amount_cents": missing field: NULL in a column that is not Nullable: column "amount_cents" is absent (a NULL, which the trigger leaves out), but Int64 is not Nullable`},
		// A create (or a snapshot read) has no previous version to take an
		// unchanged TOAST value from; an update's is filled (toast_test.go).
		{"toast status", []any{createEvent(orderRow(2, int64(1), int64(2), change.ToastPlaceholder), int64(9))},
			change.ErrToast, `record 1 (key id=2, LSN 9), column "status": incomplete TOAST value (__debezium_unavailable_value)`},
		{"toast int column", []any{createEvent(orderRow(2, change.ToastPlaceholder, int64(2), "x"), int64(9))},
			change.ErrToast, `record 1 (key id=2, LSN 9), column "customer_id": incomplete TOAST value (__debezium_unavailable_value)`},
		{"toast as a blob", []any{createEvent(orderRow(2, int64(1), int64(2), iongen.Blob(change.ToastPlaceholder)), int64(9))},
			change.ErrToast, `record 1 (key id=2, LSN 9), column "status": incomplete TOAST value (__debezium_unavailable_value)`},
		{"toast in a key", []any{iongen.Event(iongen.Struct{{"id", change.ToastPlaceholder}, {"customer_id", int64(1)}, {"amount_cents", int64(2)}, {"status", "x"}}, false, src("shop", "public", "orders", int64(9)))},
			change.ErrToast, `record 1 (LSN 9), column "id": incomplete TOAST value (__debezium_unavailable_value): a key column cannot be left unchanged`},
		{"toast after a delete", []any{orderEvent(2, nil, nil, nil, int64(9), true), orderEvent(2, int64(1), int64(2), change.ToastPlaceholder, int64(10), false)},
			change.ErrToastAfterDelete, `record 2 (key id=2, LSN 10), column "status": incomplete TOAST value (__debezium_unavailable_value): unchanged after a delete: the update leaves the column unchanged, but the key's previous event (record 1) is a delete`},
		{"deleted not bool", []any{append(orderRow(2, int64(1), int64(2), "x"), iongen.Field{"deleted", "true"}, iongen.Field{"metadata", src("shop", "public", "orders", int64(9))})},
			change.ErrBadDeleteMarker, `record 1 (key id=2, LSN 9), column "deleted": invalid delete marker: expected true or false, got an Ion string`},
		{"deleted null", []any{append(orderRow(2, int64(1), int64(2), "x"), iongen.Field{"deleted", iongen.Null(0x1)}, iongen.Field{"metadata", src("shop", "public", "orders", int64(9))})},
			change.ErrBadDeleteMarker, `record 1 (key id=2, LSN 9), column "deleted": invalid delete marker: expected true or false, got null`},
		{"truncate with a column", []any{iongen.Event(iongen.Struct{{"id", int64(3)}}, true, iongen.Metadata("TRUNCATE", iongen.Source("shop", "public", "orders", int64(9), 1, "false")))},
			change.ErrContradiction, `record 1 (key id=3, LSN 9), column "id": event contradicts itself: a TRUNCATE event with the row column "id" (the trigger writes a TRUNCATE without columns)`},
		{"delete without the marker", []any{iongen.Event(orderRow(2, int64(1), int64(2), "x"), false, iongen.Metadata("DELETE", iongen.Source("shop", "public", "orders", int64(9), 1, "false")))},
			change.ErrContradiction, `record 1 (key id=2, LSN 9), column "metadata.operation": event contradicts itself: metadata.operation is DELETE but "deleted" is not true (a delete applied as a live row would resurrect it)`},
		{"update with the marker", []any{iongen.Event(orderRow(2, int64(1), int64(2), "x"), true, iongen.Metadata("UPDATE", iongen.Source("shop", "public", "orders", int64(9), 1, "false")))},
			change.ErrContradiction, `record 1 (key id=2, LSN 9), column "metadata.operation": event contradicts itself: metadata.operation is UPDATE but "deleted" is true (a live row applied as a delete would lose it)`},
		{"unknown operation", []any{iongen.Event(orderRow(2, int64(1), int64(2), "x"), false, iongen.Metadata("MERGE", iongen.Source("shop", "public", "orders", int64(9), 1, "false")))},
			change.ErrContradiction, `record 1 (key id=2, LSN 9), column "metadata.operation": event contradicts itself: metadata.operation "MERGE" is not one Debezium's PostgreSQL connector sends (READ, CREATE, UPDATE, DELETE, TRUNCATE)`},
		{"conflict", []any{ok, orderEvent(1, int64(10), int64(501), "new", int64(100), false)},
			change.ErrConflict, `record 2 (key id=1, LSN 100, same as record 1): conflicting changes share a key and LSN`},
		{"conflict with an older version", []any{ok, orderEvent(1, int64(10), int64(500), "new", int64(200), false), orderEvent(1, int64(11), int64(500), "new", int64(100), false)},
			change.ErrConflict, `record 3 (key id=1, LSN 100, same as record 1): conflicting changes share a key and LSN`},
		{"delete conflicts with update", []any{ok, orderEvent(1, nil, nil, nil, int64(100), true)},
			change.ErrConflict, `record 2 (key id=1, LSN 100, same as record 1): conflicting changes share a key and LSN`},
		{"not a struct", []any{ok, iongen.List{int64(1)}},
			change.ErrNotStruct, `record 2: change event is not an Ion struct: got an Ion list (each record is one struct: the row's columns, deleted and metadata)`},
		{"repeated field", []any{append(orderEvent(2, int64(1), int64(2), "x", int64(9), false), iongen.Field{"status", "y"})},
			change.ErrMalformed, `record 1 (key id=2, LSN 9), column "status": malformed Ion: field "status" appears twice in one event`},
		// A repeated metadata field is refused as a repeated column is: one
		// of two LSNs (or operations, or databases) was taken silently, the
		// first or the last by where the repeat stood.
		{"repeated LSN", []any{iongen.Event(orderRow(2, int64(1), int64(2), "x"), false,
			iongen.Metadata("UPDATE", append(iongen.Source("shop", "public", "orders", int64(9), 1, "false"), iongen.Field{"lsn", int64(999999)})))},
			change.ErrMalformed, `record 1 (key id=2, LSN 9), column "metadata.source.lsn": malformed Ion: field "metadata.source.lsn" appears twice in one event`},
		{"repeated source database", []any{iongen.Event(orderRow(2, int64(1), int64(2), "x"), false,
			iongen.Metadata("UPDATE", append(iongen.Struct{{"db", "other"}}, iongen.Source("shop", "public", "orders", int64(9), 1, "false")...)))},
			change.ErrMalformed, `record 1 (key id=2, LSN 9), column "metadata.source.db": malformed Ion: field "metadata.source.db" appears twice in one event`},
		{"repeated operation", []any{iongen.Event(orderRow(2, int64(1), int64(2), "x"), false,
			append(iongen.Metadata("UPDATE", iongen.Source("shop", "public", "orders", int64(9), 1, "false")), iongen.Field{"operation", "DELETE"}))},
			change.ErrMalformed, `record 1 (key id=2, LSN 9), column "metadata.operation": malformed Ion: field "metadata.operation" appears twice in one event`},
	}
}

func TestDecodeRefusals(t *testing.T) {
	m := loadMapping(t, ordersMapping)
	for _, f := range forms() {
		for _, tt := range ordersRefusals() {
			t.Run(f.name+"/"+tt.name, func(t *testing.T) {
				_, err := decodeBytes(t, m, encode(t, f.binary, tt.events...), 2)
				if err == nil {
					t.Fatal("decoded without error")
				}
				if !errors.Is(err, tt.is) {
					t.Errorf("error %v is not %v", err, tt.is)
				}
				got := err.Error()
				if !f.binary { // text errors name the line (one event per line here)
					tt.want = withLine(tt.want)
				}
				if got != tt.want {
					t.Errorf("error\n got %s\nwant %s", got, tt.want)
				}
			})
		}
	}
}

// withLine adds "line N" to a refusal of record N.
func withLine(msg string) string {
	var rec int
	if _, err := fmt.Sscanf(msg, "record %d", &rec); err != nil {
		return msg
	}
	prefix := fmt.Sprintf("record %d", rec)
	rest := msg[len(prefix):]
	if strings.HasPrefix(rest, " (") {
		return fmt.Sprintf("%s (line %d, %s", prefix, rec, rest[2:])
	}
	return fmt.Sprintf("%s (line %d)%s", prefix, rec, rest)
}

func TestDecodeAccepts(t *testing.T) {
	m := loadMapping(t, ordersMapping)
	maxLSN := new(big.Int).SetUint64(18446744073709551615)
	tests := []struct {
		name  string
		event any
		want  string
	}{
		{"Int64 limits (binary Ion calls -2^63 a big int)", orderEvent(math.MinInt64, int64(math.MaxInt64), int64(math.MinInt64), "x", int64(3), false),
			`{"id": -9223372036854775808, "customer_id": 9223372036854775807, "amount_cents": -9223372036854775808, "status": "x", "_cdc_lsn": 3, "_cdc_deleted": 0}`},
		{"max LSN", orderEvent(1, int64(1), int64(2), "x", maxLSN, false),
			`{"id": 1, "customer_id": 1, "amount_cents": 2, "status": "x", "_cdc_lsn": 18446744073709551615, "_cdc_deleted": 0}`},
		{"32 code points in 64 bytes", orderEvent(1, int64(1), int64(2), strings.Repeat("é", 32), int64(5), false),
			`{"id": 1, "customer_id": 1, "amount_cents": 2, "status": "` + strings.Repeat("é", 32) + `", "_cdc_lsn": 5, "_cdc_deleted": 0}`},
		{"delete with TOAST in a non-key column", orderEvent(1, nil, int64(3), change.ToastPlaceholder, int64(5), true),
			`{"id": 1, "customer_id": 0, "amount_cents": 0, "status": "", "_cdc_lsn": 5, "_cdc_deleted": 1}`},
		{"delete with only the key", iongen.Event(iongen.Struct{{"id", int64(1)}}, true, iongen.Metadata("DELETE", iongen.Source("shop", "public", "orders", int64(5), 1, "false"))),
			`{"id": 1, "customer_id": 0, "amount_cents": 0, "status": "", "_cdc_lsn": 5, "_cdc_deleted": 1}`},
		{"integral decimals, as the seed accepts them", orderEvent(1, iongen.Decimal("5."), iongen.Decimal("-7."), "x", iongen.Decimal("9."), false),
			`{"id": 1, "customer_id": 5, "amount_cents": -7, "status": "x", "_cdc_lsn": 9, "_cdc_deleted": 0}`},
		{"symbols for strings", iongen.Event(orderRow(1, int64(1), int64(2), iongen.Symbol("paid")), false,
			iongen.Metadata("CREATE", iongen.Struct{{"db", iongen.Symbol("shop")}, {"schema", "public"}, {"table", "orders"}, {"lsn", int64(5)}})),
			`{"id": 1, "customer_id": 1, "amount_cents": 2, "status": "paid", "_cdc_lsn": 5, "_cdc_deleted": 0}`},
		{"control characters", orderEvent(1, int64(1), int64(2), "a\x01\tb\u2028\x7f", int64(5), false),
			`{"id": 1, "customer_id": 1, "amount_cents": 2, "status": "a\u0001\tb` + "\u2028\x7f" + `", "_cdc_lsn": 5, "_cdc_deleted": 0}`},
	}
	for _, f := range forms() {
		for _, tt := range tests {
			t.Run(f.name+"/"+tt.name, func(t *testing.T) {
				b, err := decodeBytes(t, m, encode(t, f.binary, tt.event), 1)
				if err != nil {
					t.Fatal(err)
				}
				if got := strings.TrimSuffix(jsonLines(b), "\n"); got != tt.want {
					t.Errorf("row\n got %s\nwant %s", got, tt.want)
				}
			})
		}
	}
}

// valueSize is the size of the binary Ion value at the start of b: its
// type descriptor, the VarUInt length that follows when the descriptor's
// length is 14, and its body (here: the symbol table before a record).
func valueSize(b []byte) int {
	size, n := int(b[0]&0x0F), 1
	if size == 0x0E {
		size = 0
		for done := false; !done; n++ {
			size, done = size<<7|int(b[n]&0x7F), b[n]&0x80 != 0
		}
	}
	return n + size
}

func TestDecodeMalformed(t *testing.T) {
	m := loadMapping(t, ordersMapping)
	good := func(id int64) iongen.Struct { return orderEvent(id, int64(1), int64(2), "x", int64(100+id), false) }
	text := encode(t, false, good(1), good(2), good(3))
	lines := bytes.SplitAfter(text, []byte("\n"))
	truncated := append(append(append([]byte{}, lines[0]...), lines[1][:20]...), '\n')
	truncated = append(truncated, lines[2]...)
	bin := encode(t, true, good(1), good(2), good(3))
	// The third row's struct: after its chunk's version marker and symbol table.
	chunk := encode(t, true, good(3))
	lst := valueSize(chunk[4:])
	third := len(bin) - len(chunk) + 4 + int(lst)
	thirdSize := len(chunk) - 4 - int(lst)
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"truncated text line", truncated,
			fmt.Sprintf("record 2 (line 2, byte %d): malformed Ion: ion: unexpected token '<EOF>' (offset %[1]d)", len(lines[0])+20)},
		{"garbage text", []byte("{id:1,\n  ]]]\n"),
			"record 1 (line 1, byte 6): malformed Ion: ion: unexpected token '<EOF>' (offset 6)"},
		// ion-go's offsets within a later record, shifted to the file's
		// (shiftIon): an UnexpectedRuneError, then UnexpectedEOFErrors.
		{"bad rune in a later record", append(append([]byte{}, lines[0]...), "{id:\x01}\n"...),
			fmt.Sprintf("record 2 (line 2, byte %d): malformed Ion: ion: unexpected rune '\\x01' (offset %[1]d)", len(lines[0])+4)},
		{"unterminated long string in a later record", append(append([]byte{}, lines[0]...), "{id:'''abc}\n"...),
			fmt.Sprintf("record 2 (line 2, byte %d): malformed Ion: ion: unexpected end of input (offset %[1]d)", len(lines[0])+11)},
		{"unterminated string in a later record", append(append([]byte{}, lines[0]...), "{id:\"abc\n\"}\n"...),
			fmt.Sprintf("record 2 (line 2, byte %d): malformed Ion: ion: unexpected end of input (offset %[1]d)", len(lines[0])+8)},
		{"not ion at all", []byte("\x00\x01\x02 hello"),
			"record 1 (line 1, byte 0): malformed Ion: ion: unexpected rune '\\x00' (offset 0)"},
		{"truncated binary", bin[:len(bin)-7],
			fmt.Sprintf("record 3 (byte %d): malformed Ion: a value of %d bytes runs past the end of the file (truncated)", third, thirdSize)},
		{"garbled length", append(append([]byte{}, bin[:third]...), 0xDE, 0x7F, 0x7F, 0x7F, 0x7F, 0x7F, 0x01),
			fmt.Sprintf("record 3 (byte %d): malformed Ion: a length that is not a VarUInt of at most 5 bytes (truncated or garbled)", third)},
		{"huge length", append(append([]byte{}, bin[:third]...), 0xDE, 0x7F, 0x7F, 0x7F, 0x7F, 0xFF, 0x01),
			fmt.Sprintf("record 3 (byte %d): malformed Ion: a value of 34359738373 bytes (garbled length; at most 1073741824)", third)},
		{"garbled binary", append(append(append([]byte{}, bin[:len(bin)/3]...), 0xF3, 0xFF), bin[len(bin)/3:]...), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeBytes(t, m, tt.data, 2)
			if !errors.Is(err, change.ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
			var re *change.RecordError
			if !errors.As(err, &re) || re.Record == 0 {
				t.Fatalf("err %v names no record", err)
			}
			if tt.want != "" && err.Error() != tt.want {
				t.Errorf("error\n got %s\nwant %s", err, tt.want)
			}
		})
	}
}

// TestDecodeMultiLineText accepts text Ion whose values span lines (not
// what Kestra writes, but valid Ion) through the one-stream fallback.
func TestDecodeMultiLineText(t *testing.T) {
	m := loadMapping(t, ordersMapping)
	data := []byte(`$ion_1_0
{id: 1, customer_id: 2, amount_cents: 3,
  status: "a", // a comment
  deleted: false,
  metadata: {source: {db: "shop", schema: "public", table: "orders", lsn: 9}}}
`)
	b, err := decodeBytes(t, m, data, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got := jsonLines(b); got != `{"id": 1, "customer_id": 2, "amount_cents": 3, "status": "a", "_cdc_lsn": 9, "_cdc_deleted": 0}`+"\n" {
		t.Errorf("got %s", got)
	}
}

// TestOutOfOrderVersions covers the second pass: a key whose events come
// out of LSN order has its versions checked against each other, and a key
// in order keeps nothing but its latest row.
func TestOutOfOrderVersions(t *testing.T) {
	m := loadMapping(t, ordersMapping)
	ev := func(id int64, amount int64, lsn int64) any { return orderEvent(id, int64(1), amount, "x", lsn, false) }
	for _, f := range forms() {
		t.Run(f.name, func(t *testing.T) {
			b, err := decodeBytes(t, m, encode(t, f.binary, ev(1, 10, 300), ev(2, 5, 50), ev(1, 11, 100), ev(2, 6, 60), ev(1, 12, 200), ev(1, 11, 100)), 2)
			if err != nil {
				t.Fatal(err)
			}
			if len(b.OutOfOrder) != 1 || !strings.Contains(jsonLines(b), `"amount_cents": 10, "status": "x", "_cdc_lsn": 300`) {
				t.Errorf("out of order %v, rows %s", b.OutOfOrder, jsonLines(b))
			}
			_, err = decodeBytes(t, m, encode(t, f.binary, ev(1, 10, 300), ev(1, 11, 100), ev(2, 5, 50), ev(1, 12, 200), ev(1, 13, 100)), 2)
			want := "record 5 (key id=1, LSN 100, same as record 2): conflicting changes share a key and LSN"
			if !f.binary {
				want = withLine(want)
			}
			if !errors.Is(err, change.ErrConflict) || err.Error() != want {
				t.Errorf("err = %v, want %s", err, want)
			}
		})
	}
}

// TestDecodeMatchesIonGo decodes the committed batches, the Debezium
// harness's real batches when present, and trigger-shaped batches of a few
// segments with the default decoder and with ion-go alone: the batches,
// rows and the kept metadata are the same.
func TestDecodeMatchesIonGo(t *testing.T) {
	type input struct {
		name, path string
		m          *mapping.Mapping
	}
	var inputs []input
	for _, c := range committedBatches {
		for _, f := range forms() {
			inputs = append(inputs, input{c.name + "/" + f.name, batchPath(c.name, f.binary), loadMapping(t, c.mapping)})
		}
	}
	for _, p := range seedFiles(t) {
		if filepath.Dir(p) != "testdata" {
			m := ordersMapping
			if mp := filepath.Join(filepath.Dir(p), "mapping.yaml"); fileExists(mp) {
				m = mp
			}
			inputs = append(inputs, input{p, p, loadMapping(t, m)})
		}
	}
	for _, f := range forms() {
		inputs = append(inputs, input{"trigger/" + f.name, writeFile(t, "changes.ion", encode(t, f.binary, triggerBatch(6000)...)), loadMapping(t, ordersMapping)})
	}
	for _, in := range inputs {
		t.Run(in.name, func(t *testing.T) {
			got, gerr := decodeFileWith(context.Background(), in.path, in.m, decodeOptions{workers: 2})
			want, werr := decodeFileWith(context.Background(), in.path, in.m, decodeOptions{workers: 2, ionOnly: true})
			sameErrors(t, gerr, werr)
			if gerr == nil {
				sameBatches(t, got, want)
			}
		})
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// TestSurrogateEscapes: text Ion may write a character beyond U+FFFF as a
// UTF-16 surrogate pair of \u escapes; both readers stored each half as
// U+FFFD and the run succeeded with a changed value. The pair is the one
// character it encodes, and an escape that names no character (a lone
// surrogate, a \U of one or beyond U+10FFFF) is refused naming the record,
// the line and the escape (see package ionesc for what Ion says). Every
// path: line by line (the fast reader, ion-go for a line it leaves), a
// segment as one ion-go stream (a long string), ion-go alone (the oracle),
// and the whole file as one stream (a record spanning lines).
func TestSurrogateEscapes(t *testing.T) {
	m := loadMapping(t, ordersMapping)
	tests := []struct {
		name, status string // status as written in the text
		want         string // the status read; "" = refused
		refused      string // the escape refused
	}{
		{"pair", `"a\ud83d\ude00b"`, "a😀b", ""},
		{"pair in upper case", `"\uD83D\uDE00"`, "😀", ""},
		{"first and last", `"\ud800\udc00\udbff\udfff"`, "\U00010000\U0010FFFF", ""},
		{"pair in a symbol", `'a\ud83d\ude00b'`, "a😀b", ""},
		{"pair in a long string", `'''a\ud83d\ude00b'''`, "a😀b", ""},
		{"pair in the second long string", `'''a''' '''\ud83d\ude00b'''`, "a😀b", ""},
		{"8-digit escape", `"\U0001F600"`, "😀", ""},
		{"escaped backslash", `"a\\ud800b"`, `a\ud800b`, ""},
		{"escaped backslash then a pair", `"\\\ud83d\ude00"`, `\😀`, ""},

		{"lone high", `"a\ud800b"`, "", `\ud800`},
		{"lone low", `"a\udc00b"`, "", `\udc00`},
		{"high then not a low", `"\ud800\uabcd"`, "", `\ud800`},
		{"low then high", `"\ude00\ud83d"`, "", `\ude00`},
		{"lone high in a symbol", `'a\ud800b'`, "", `\ud800`},
		{"lone low in a long string", `'''a\udc00b'''`, "", `\udc00`},
		{"pair split across long strings", `'''\ud83d''' '''\ude00'''`, "", `\ud83d`},
		{"8-digit surrogate", `"\U0000D800"`, "", `\U0000D800`},
		{"beyond U+10FFFF", `"\U00110000"`, "", `\U00110000`},
	}
	paths := []struct {
		name  string
		split bool // record 2 spans two lines
		opts  decodeOptions
	}{{"lines", false, decodeOptions{workers: 2}}, {"ion-go", false, decodeOptions{workers: 2, ionOnly: true}}, {"stream", true, decodeOptions{workers: 2}}}
	for _, tt := range tests {
		for _, p := range paths {
			t.Run(tt.name+"/"+p.name, func(t *testing.T) {
				data := encode(t, false, orderEvent(1, int64(1), int64(1), "ok", int64(100), false),
					orderEvent(2, int64(1), int64(1), "QQQ", int64(101), false))
				data = bytes.Replace(data, []byte(`"QQQ"`), []byte(tt.status), 1)
				if p.split {
					second := bytes.IndexByte(data, '\n') + 1
					data = append(data[:second:second], bytes.Replace(data[second:], []byte(",customer_id:"), []byte(",\ncustomer_id:"), 1)...)
				}
				b, err := decodeFileWith(context.Background(), writeFile(t, "changes.ion", data), m, p.opts)
				if tt.want != "" {
					if err != nil {
						t.Fatal(err)
					}
					if got := b.Sorted()[1].Vals[3].S; got != tt.want {
						t.Errorf("status %q, want %q", got, tt.want)
					}
					return
				}
				if err == nil {
					t.Fatalf("accepted, status %q", b.Sorted()[1].Vals[3].S)
				}
				var re *change.RecordError
				if !errors.As(err, &re) || !errors.Is(err, change.ErrMalformed) || re.Record != 2 {
					t.Fatalf("not ErrMalformed naming record 2: %v", err)
				}
				if want := int64(bytes.Index(data, []byte(tt.refused))); re.Offset != want {
					t.Errorf("byte %d, want %d: %v", re.Offset, want, err)
				}
				if !p.split && re.Line != 2 {
					t.Errorf("line %d, want 2: %v", re.Line, err)
				}
				if want := "the escape " + tt.refused + " names no Unicode character"; !strings.Contains(err.Error(), want) {
					t.Errorf("error %v does not say %q", err, want)
				}
			})
		}
	}
}

// TestContradictions: an event whose operation and delete marker disagree
// is refused before anything is written.
func TestContradictions(t *testing.T) {
	src := func(op string, lsn int64) iongen.Struct {
		return iongen.Metadata(op, iongen.Source("shop", "public", "orders", lsn, 700, "false"))
	}
	row := orderRow(1, int64(10), int64(500), "paid")
	noMarker := append(append(iongen.Struct{}, row...), iongen.Field{Name: "metadata", Value: src("DELETE", 102)})
	for _, tc := range []struct {
		name  string
		event any
		want  string
	}{
		{"delete with deleted false", iongen.Event(row, false, src("DELETE", 102)), `metadata.operation is DELETE but "deleted" is not true`},
		{"delete without deleted", noMarker, `metadata.operation is DELETE but "deleted" is not true`},
		{"create with deleted true", iongen.Event(row, true, src("CREATE", 102)), `metadata.operation is CREATE but "deleted" is true`},
		{"update with deleted true", iongen.Event(row, true, src("UPDATE", 102)), `metadata.operation is UPDATE but "deleted" is true`},
		{"read with deleted true", iongen.Event(row, true, src("READ", 102)), `metadata.operation is READ but "deleted" is true`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, ordersMapping)
			e.setup()
			if _, _, err := e.apply(false, orderEvent(1, int64(10), int64(500), "new", int64(100), false)); err != nil {
				t.Fatal(err)
			}
			before := e.physical()
			_, cfg, err := e.apply(true, orderEvent(2, int64(20), int64(1), "fine", int64(101), false), tc.event)
			wantError(t, err, outcome.Refused, change.ErrContradiction)
			if !strings.HasPrefix(err.Error(), `record 2 (key id=1, LSN 102), column "metadata.operation": event contradicts itself: `) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("message %v", err)
			}
			noOutputs(t, cfg)
			if after := e.physical(); after != before {
				t.Errorf("the refused batch changed the target:\n%s", after)
			}
		})
	}
}

// TestSequenceContradiction: a sequence naming another LSN than the
// event's is refused (Debezium writes [lsn_commit, lsn]).
func TestSequenceContradiction(t *testing.T) {
	m := loadMapping(t, ordersMapping)
	ev := withSource(orderEvent(1, int64(1), int64(1), "x", int64(950), false), "sequence", `["900","951"]`)
	_, err := decodeBytes(t, m, encode(t, true, ev), 1)
	if !errors.Is(err, change.ErrContradiction) || !strings.Contains(err.Error(), `metadata.source.sequence ["900","951"] names LSN 951, but metadata.source.lsn is 950`) {
		t.Fatalf("err = %v", err)
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
	for _, pattern := range []string{"testdata/*.ion", "testdata/debezium/*/*.ion"} {
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
