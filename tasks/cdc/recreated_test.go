package cdc

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
)

// applyLogged applies events as a batch, as e.apply does, and returns what
// the run logged.
func (e *env) applyLogged(events ...any) (*Result, string, error) {
	e.t.Helper()
	cfg := e.config(writeFile(e.t, "changes.ion", encode(e.t, true, events...)))
	var log bytes.Buffer
	cfg.Log = slog.New(slog.NewTextHandler(&log, nil))
	res, err := testApply(context.Background(), cfg)
	return res, log.String(), err
}

// TestKeyRecreated: a transaction that creates a key while its row is live
// and ends without deleting either row cannot happen in the source (a
// primary key allows two rows only inside a transaction): a DELETE or a
// TRUNCATE was not captured (the trigger drops TRUNCATE by default). The
// CREATE's row is applied as the upsert it is, with a warning naming the
// key and the transaction, at the batch that sees the transaction end;
// later batches apply normally. Each case is a sequence of batches on the
// pkswap table (id, v), the target starting from a snapshot at LSN 100.
func TestKeyRecreated(t *testing.T) {
	ev := kcEvent
	shift := []any{ev("DELETE", 1, "a", 1000, 9, ""), ev("CREATE", 2, "a", 1000, 9, ""),
		ev("DELETE", 2, "b", 1100, 9, ""), ev("CREATE", 3, "b", 1100, 9, "")}
	for _, tc := range []struct {
		name      string
		target    map[int64]string
		batches   [][]any
		live      string
		recreated []int64  // Result.Recreated of each batch
		warns     []string // what the batch that ends the transaction logs
	}{
		{
			// The case 3: batches 1, 2, 3 in order; batch 2 ends
			// inside transaction 2, so batch 3 sees it end.
			name:      "a CREATE of a live key in its own batch",
			batches:   [][]any{{ev("CREATE", 1, "one", 1000, 1, "")}, {ev("CREATE", 1, "again", 2000, 2, "")}, {ev("CREATE", 3, "three", 3000, 3, "")}},
			live:      `{"id":1,"v":"again"}` + "\n" + `{"id":3,"v":"three"}` + "\n",
			recreated: []int64{0, 0, 1},
			warns:     []string{"1 keys were created again while live", "key id=1 (transaction 2)", "TRUNCATE"},
		},
		{
			name:      "a later transaction updates the key",
			target:    map[int64]string{7: "seven"},
			batches:   [][]any{{ev("UPDATE", 7, "seven*", 1000, 8, ""), ev("CREATE", 7, "again", 1100, 9, "1050"), ev("UPDATE", 7, "later", 1200, 10, "1150")}},
			live:      `{"id":7,"v":"later"}` + "\n",
			recreated: []int64{1},
			warns:     []string{"key id=7 (transaction 9, record 2)"},
		},
		{
			name:      "the batch ends after the transaction",
			target:    map[int64]string{7: "seven"},
			batches:   [][]any{{ev("UPDATE", 7, "seven*", 1000, 8, ""), ev("CREATE", 7, "again", 1100, 9, "1050"), ev("CREATE", 8, "eight", 1200, 10, "1150")}},
			live:      `{"id":7,"v":"again"}` + "\n" + `{"id":8,"v":"eight"}` + "\n",
			recreated: []int64{1},
			warns:     []string{"key id=7 (transaction 9, record 2)"},
		},
		{
			name:      "the target holds the key, and the transaction ends",
			target:    map[int64]string{7: "seven"},
			batches:   [][]any{{ev("CREATE", 7, "again", 1000, 9, ""), ev("CREATE", 8, "eight", 1100, 10, "")}},
			live:      `{"id":7,"v":"again"}` + "\n" + `{"id":8,"v":"eight"}` + "\n",
			recreated: []int64{1},
			warns:     []string{"key id=7 (transaction 9, record 1)"},
		},
		{
			// TestPKShiftAcrossBatches's first batch, then a batch of
			// another transaction: key 3 keeps the row it got.
			name:      "the next batch does not continue a key left open",
			target:    map[int64]string{1: "a", 2: "b", 3: "c"},
			batches:   [][]any{shift, {ev("CREATE", 5, "five", 1300, 10, "")}},
			live:      `{"id":2,"v":"a"}` + "\n" + `{"id":3,"v":"b"}` + "\n" + `{"id":5,"v":"five"}` + "\n",
			recreated: []int64{0, 1},
			warns:     []string{"key id=3 (transaction 9)"},
		},
		{
			name:      "the next batch changes a key left open, in another transaction",
			target:    map[int64]string{1: "a", 2: "b", 3: "c"},
			batches:   [][]any{shift, {ev("UPDATE", 3, "b*", 1300, 10, "")}},
			live:      `{"id":2,"v":"a"}` + "\n" + `{"id":3,"v":"b*"}` + "\n",
			recreated: []int64{0, 1},
			warns:     []string{"key id=3 (transaction 9)"},
		},
		{
			// A key swap the deletes resolve is no recreated key.
			name:   "a rotation resolved by its deletes",
			target: map[int64]string{1: "a", 2: "b", 3: "c"},
			batches: [][]any{{ev("DELETE", 1, "a", 1000, 9, ""), ev("CREATE", 2, "a", 1000, 9, ""), ev("DELETE", 2, "b", 1100, 9, ""),
				ev("CREATE", 3, "b", 1100, 9, ""), ev("DELETE", 3, "c", 1200, 9, ""), ev("CREATE", 1, "c", 1200, 9, ""), ev("CREATE", 4, "d", 1300, 10, "")}},
			live:      `{"id":1,"v":"c"}` + "\n" + `{"id":2,"v":"a"}` + "\n" + `{"id":3,"v":"b"}` + "\n" + `{"id":4,"v":"d"}` + "\n",
			recreated: []int64{0},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := scenarioEnv(t, "pkswap")
			if tc.target != nil {
				e.seedSwap(tc.target)
			}
			for n, batch := range tc.batches {
				res, log, err := e.applyLogged(batch...)
				if err != nil {
					t.Fatalf("batch %d: %v", n+1, err)
				}
				if res.Recreated != tc.recreated[n] || res.Outputs()["recreated"] != tc.recreated[n] {
					t.Errorf("batch %d: recreated %d, want %d", n+1, res.Recreated, tc.recreated[n])
				}
				if tc.recreated[n] == 0 {
					if strings.Contains(log, "created again") {
						t.Errorf("batch %d warned:\n%s", n+1, log)
					}
					continue
				}
				for _, w := range tc.warns {
					if !strings.Contains(log, w) || !strings.Contains(log, "level=WARN") {
						t.Errorf("batch %d: the log does not say %q:\n%s", n+1, w, log)
					}
				}
			}
			if got := e.liveJSON(); got != tc.live {
				t.Errorf("live rows\n%s\nwant\n%s", got, tc.live)
			}
			// Each batch again is a replay: nothing pending.
			for n, batch := range tc.batches {
				if res, _, err := e.applyLogged(batch...); err != nil || res.Pending != 0 {
					t.Errorf("replay of batch %d: %v, %v", n+1, res, err)
				}
			}
		})
	}
}

// TestRealResnapshot: a real capture of an operator's recovery from a
// TRUNCATE the trigger dropped (testdata/debezium/resnapshot): keys 1 and 2
// are created again while live (batch 3, ending inside their transaction),
// the trigger's offsets are deleted and it snapshots again (batch 4), then
// the stream goes on (batch 5). Every batch applies; batch 4 warns of keys
// 1 and 2, and its complete snapshot deletes keys 3 and 5, which the
// TRUNCATE removed and no batch carries: the live view holds the source's
// rows.
func TestRealResnapshot(t *testing.T) {
	for _, f := range forms() {
		t.Run(f.name, func(t *testing.T) {
			e := scenarioEnv(t, "resnapshot")
			for n := 1; n <= 5; n++ {
				cfg := e.config(filepath.Join(realBatches, "resnapshot", fmt.Sprintf("changes-%02d.%s.ion", n, form(f.binary))))
				var log bytes.Buffer
				cfg.Log = slog.New(slog.NewTextHandler(&log, nil))
				res, err := testApply(context.Background(), cfg)
				if err != nil {
					t.Fatalf("batch %d: %v", n, err)
				}
				warned := strings.Contains(log.String(), "2 keys were created again while live") &&
					strings.Contains(log.String(), "key id=1 (transaction 218138), key id=2 (transaction 218138)")
				if (n == 4) != (res.Recreated == 2 && warned) {
					t.Errorf("batch %d: recreated %d, log:\n%s", n, res.Recreated, log.String())
				}
				// The re-snapshot (batch 4) is complete: keys 3 and 5, which
				// the dropped TRUNCATE removed, are deleted at its end.
				gone := strings.Contains(log.String(), "a complete snapshot ended at LSN") && strings.Contains(log.String(), "2 keys the target held live below it")
				if (n == 4) != (res.SnapshotDeleted == 2 && gone) {
					t.Errorf("batch %d: snapshot_deleted %d, log:\n%s", n, res.SnapshotDeleted, log.String())
				}
			}
			want := `{"id":1,"v":"one, streamed"}` + "\n" + `{"id":2,"v":"two again"}` + "\n" + `{"id":6,"v":"six"}` + "\n"
			if got := e.liveJSON(); got != want {
				t.Errorf("live rows\n%s\nwant\n%s", got, want)
			}
			if !strings.Contains(sourceRows(t, "resnapshot"), `{"id":6,"v":"six"}`) {
				t.Error("the scenario's source changed")
			}
		})
	}
}
