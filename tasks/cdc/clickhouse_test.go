package cdc

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
)

// TestReadAcrossParts: the reads keep FINAL's answer with the keys as a
// PREWHERE, on versions spread over parts (a newer version in an older
// part, a delete marker, an exact duplicate), and current reads payloads
// only where the target holds the batch's own LSN.
//
//changesink:per-server
func TestReadAcrossParts(t *testing.T) {
	e := newEnv(t, ordersMapping)
	e.setup()
	name := mapping.Qualified(e.db, e.m.Target.Table)
	for _, part := range []string{ // one INSERT, one part each
		"SELECT 1, 10, 1, 'a200', 200, 0 UNION ALL SELECT 2, 20, 2, 'b100', 100, 0 UNION ALL SELECT 3, 30, 3, 'c50', 50, 0",
		"SELECT 1, 11, 1, 'a100', 100, 0 UNION ALL SELECT 2, 0, 0, '', 300, 1",
		"SELECT 3, 30, 3, 'c50', 50, 0 UNION ALL SELECT 4, 40, 4, 'd10', 10, 0",
	} {
		if err := e.conn.Exec(context.Background(), "INSERT INTO "+name+" (id, customer_id, amount_cents, status, _cdc_lsn, _cdc_deleted) "+part); err != nil {
			t.Fatal(err)
		}
	}
	tbl := e.lockedTable()
	key := func(id int64, lsn uint64) *change.Row {
		r := &change.Row{Version: lsn, Vals: make([]change.Value, len(e.m.Cols))}
		r.Vals[0] = change.Value{N: uint64(id)}
		r.Key = string(change.EncodeKey(nil, e.m, r.Vals))
		return r
	}
	batch := []*change.Row{key(1, 200), key(2, 150), key(3, 50), key(5, 1)}
	render := func(got map[string]*change.Row) string {
		var lines []string
		for _, r := range got {
			line := fmt.Sprintf("version lsn=%d deleted=%v", r.Version, r.Deleted)
			if r.Vals != nil {
				line = fmt.Sprintf("%s lsn=%d deleted=%v %s", change.RenderKey(e.m, r.Vals), r.Version, r.Deleted, change.AppendJSON(nil, e.m, r))
			}
			lines = append(lines, line)
		}
		sort.Strings(lines)
		return strings.Join(lines, "\n")
	}
	full, err := tbl.Read(context.Background(), batch)
	if err != nil {
		t.Fatal(err)
	}
	want := `id=1 lsn=200 deleted=false {"id": 1, "customer_id": 10, "amount_cents": 1, "status": "a200", "_cdc_lsn": 200, "_cdc_deleted": 0}
id=2 lsn=300 deleted=true {"id": 2, "customer_id": 0, "amount_cents": 0, "status": "", "_cdc_lsn": 300, "_cdc_deleted": 1}
id=3 lsn=50 deleted=false {"id": 3, "customer_id": 30, "amount_cents": 3, "status": "c50", "_cdc_lsn": 50, "_cdc_deleted": 0}`
	if got := render(full); got != want {
		t.Errorf("read\n%s\nwant\n%s", got, want)
	}
	// The same as the FINAL ... WHERE the reads used before (with the
	// delete markers a ReplacingMergeTree(version, deleted) hides).
	old := e.query(e.finalSQL("id, customer_id, amount_cents, status, _cdc_lsn, _cdc_deleted", "id IN (1, 2, 3, 5)"))
	if strings.Join(old, "\n") != "1\t10\t1\ta200\t200\t0\n2\t0\t0\t\t300\t1\n3\t30\t3\tc50\t50\t0" {
		t.Errorf("FINAL ... WHERE gives %q", old)
	}
	cur, err := tbl.Current(context.Background(), batch)
	if err != nil {
		t.Fatal(err)
	}
	want = `id=1 lsn=200 deleted=false {"id": 1, "customer_id": 10, "amount_cents": 1, "status": "a200", "_cdc_lsn": 200, "_cdc_deleted": 0}
id=3 lsn=50 deleted=false {"id": 3, "customer_id": 30, "amount_cents": 3, "status": "c50", "_cdc_lsn": 50, "_cdc_deleted": 0}
version lsn=300 deleted=true`
	if got := render(cur); got != want {
		t.Errorf("current (payloads only at the batch's own LSN)\n%s\nwant\n%s", got, want)
	}
}

// TestInsertIsOnePart: a batch's rows go in one INSERT block, which
// ClickHouse writes as one part of a table without PARTITION BY: a run cut
// during the insert leaves none of them or all. The batch is larger than
// the 100,000-row blocks used before.
//
//changesink:per-server
func TestInsertIsOnePart(t *testing.T) {
	e := newEnv(t, ordersMapping)
	e.setup()
	const n = 120_000
	evs := make([]any, n)
	for i := range evs {
		evs[i] = orderEvent(int64(i), int64(i), int64(i), "x", int64(1000+i), false)
	}
	res, _, err := e.apply(true, evs...)
	if err != nil {
		t.Fatal(err)
	}
	if res.Pending != n {
		t.Fatalf("outputs %v", res.Outputs())
	}
	if got := e.query("SELECT count(), sum(rows) FROM system.parts WHERE database = ? AND table = 'orders_cdc' AND active", e.db); got[0] != fmt.Sprintf("1\t%d", n) {
		t.Errorf("parts (count, rows) %v, want one part of %d rows", got, n)
	}
	if got := e.query("SELECT partition_key FROM system.tables WHERE database = ? AND name = 'orders_cdc'", e.db); got[0] != "" {
		t.Errorf("setup made a partitioned table: %v", got)
	}
}
