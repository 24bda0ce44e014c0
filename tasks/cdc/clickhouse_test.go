package cdc

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
)

// TestReadAcrossParts: the reads keep FINAL's answer with the keys as a
// PREWHERE, on versions spread over parts (a newer version in an older
// part, a delete marker, an exact duplicate), and current reads payloads
// only where the target holds the batch's own LSN.
func TestReadAcrossParts(t *testing.T) {
	e := newEnv(t, ordersMapping)
	e.setup()
	name := qualified(e.db, e.m.Target.Table)
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
	key := func(id int64, lsn uint64) *row {
		r := &row{lsn: lsn, vals: make([]value, len(e.m.cols))}
		r.vals[0] = value{n: uint64(id)}
		r.key = string(encodeKey(nil, e.m, r.vals))
		return r
	}
	batch := []*row{key(1, 200), key(2, 150), key(3, 50), key(5, 1)}
	render := func(got map[string]*row) string {
		var lines []string
		for _, r := range got {
			line := fmt.Sprintf("version lsn=%d deleted=%v", r.lsn, r.deleted)
			if r.vals != nil {
				line = fmt.Sprintf("%s lsn=%d deleted=%v %s", renderKey(e.m, r.vals), r.lsn, r.deleted, appendJSONRow(nil, e.m, r))
			}
			lines = append(lines, line)
		}
		sort.Strings(lines)
		return strings.Join(lines, "\n")
	}
	full, err := tbl.read(context.Background(), batch)
	if err != nil {
		t.Fatal(err)
	}
	want := `id=1 lsn=200 deleted=false {"id": 1, "customer_id": 10, "amount_cents": 1, "status": "a200", "_cdc_lsn": 200, "_cdc_deleted": 0}
id=2 lsn=300 deleted=true {"id": 2, "customer_id": 0, "amount_cents": 0, "status": "", "_cdc_lsn": 300, "_cdc_deleted": 1}
id=3 lsn=50 deleted=false {"id": 3, "customer_id": 30, "amount_cents": 3, "status": "c50", "_cdc_lsn": 50, "_cdc_deleted": 0}`
	if got := render(full); got != want {
		t.Errorf("read\n%s\nwant\n%s", got, want)
	}
	// The same as the FINAL ... WHERE the reads used before.
	old := e.query("SELECT id, customer_id, amount_cents, status, _cdc_lsn, _cdc_deleted FROM " + name + " FINAL WHERE id IN (1, 2, 3, 5) ORDER BY id")
	if strings.Join(old, "\n") != "1\t10\t1\ta200\t200\t0\n2\t0\t0\t\t300\t1\n3\t30\t3\tc50\t50\t0" {
		t.Errorf("FINAL ... WHERE gives %q", old)
	}
	cur, err := tbl.current(context.Background(), batch)
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
