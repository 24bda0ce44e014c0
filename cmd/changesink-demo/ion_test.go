package main

import (
	"bytes"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/amazon-ion/ion-go/ion"
)

// TestEncodeInline checks the batch shape the cdc flow receives from Kestra's
// Debezium trigger (INLINE, deleted and metadata ADD_FIELD), in both Ion forms.
func TestEncodeInline(t *testing.T) {
	commit := time.Date(2026, 11, 29, 10, 30, 0, 123456789, time.UTC)
	changes := []change{
		{DB: "shop", Schema: "public", Table: "orders", Operation: "CREATE", LSN: 0x1D8CFD0, TxID: 740, CommitTime: commit,
			Columns: []column{{Name: "id", Type: oidInt8, Text: "1"}, {Name: "status", Type: 25, Text: "new"}}},
		{DB: "shop", Schema: "public", Table: "orders", Operation: "DELETE", LSN: 1 << 40, TxID: 741, CommitTime: commit,
			Columns: []column{{Name: "id", Type: oidInt8, Text: "1"}, {Name: "status", Type: 25, Null: true}}},
	}
	for _, tc := range []struct {
		name   string
		binary bool
	}{{"text", false}, {"binary", true}} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			for _, ch := range changes {
				if err := encodeInline(&buf, ch, commit, tc.binary); err != nil {
					t.Fatal(err)
				}
			}
			if !tc.binary {
				lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
				if len(lines) != len(changes) {
					t.Fatalf("got %d lines, want one value per line (%d):\n%s", len(lines), len(changes), buf.String())
				}
			} else if got := bytes.Count(buf.Bytes(), []byte{0xE0, 0x01, 0x00, 0xEA}); got != len(changes) {
				t.Fatalf("got %d binary version markers, want one per value (%d)", got, len(changes))
			}
			dec := ion.NewDecoder(ion.NewReader(&buf))
			for i, want := range changes {
				v, err := dec.Decode()
				if err != nil {
					t.Fatalf("value %d: %v", i+1, err)
				}
				rec := v.(map[string]any)
				meta := rec["metadata"].(map[string]any)
				src := meta["source"].(map[string]any)
				if got := rec["deleted"]; got != (want.Operation == "DELETE") {
					t.Errorf("value %d: deleted = %v", i+1, got)
				}
				if got := *meta["operation"].(*string); got != want.Operation {
					t.Errorf("value %d: operation = %s, want %s", i+1, got, want.Operation)
				}
				if got := lsnOf(t, src["lsn"]); got != uint64(want.LSN) {
					t.Errorf("value %d: lsn = %d, want %d", i+1, got, uint64(want.LSN))
				}
				for _, k := range []string{"db", "schema", "table"} {
					if src[k] == nil {
						t.Errorf("value %d: source.%s missing", i+1, k)
					}
				}
				ts := meta["timestamp"].(*ion.Timestamp)
				if got := ts.GetDateTime(); !got.Equal(commit.Truncate(time.Millisecond)) {
					t.Errorf("value %d: timestamp = %v, want millisecond precision %v", i+1, got, commit.Truncate(time.Millisecond))
				}
				if _, written := rec["status"]; want.Columns[1].Null && written {
					t.Errorf("value %d: a NULL status is written (%v); the trigger omits NULL columns", i+1, rec["status"])
				}
			}
		})
	}
}

func lsnOf(t *testing.T, v any) uint64 {
	t.Helper()
	switch n := v.(type) {
	case int:
		return uint64(n)
	case int64:
		return uint64(n)
	case *big.Int:
		return n.Uint64()
	}
	t.Fatalf("lsn has type %T", v)
	return 0
}
