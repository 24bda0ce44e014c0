package cdc

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/target"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/changesink/changesink/internal/outcome"
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

// TestSystemTablesUnderOtherDDL: ClickHouse 18.16 fails a read of
// system.tables (UNKNOWN_TABLE naming another table, or a missing metadata
// file) while another table of the database is renamed or dropped, as
// every run's lock is. Another target's runs in the same database take and
// give back their lock back to back while this target's runs apply
// batches and read the lock tables: none fails. Without the re-reads
// (systemTables) about 1 read in 20 failed, and apply exited 2 saying
// "run changesink cdc setup first".
//
//changesink:per-server
func TestSystemTablesUnderOtherDDL(t *testing.T) {
	e := newEnv(t, ordersMapping)
	e.setup()
	other := e.db + ".other_cdc_lock"
	var stop atomic.Bool
	churned := make(chan int)
	go func() {
		n := 0
		for ; !stop.Load(); n++ {
			_ = e.conn.Exec(context.Background(), "CREATE TABLE "+other+" ENGINE = Memory AS SELECT 'h' AS holder, now() AS beat")
			_ = e.conn.Exec(context.Background(), "RENAME TABLE "+other+" TO "+other+"_x0000000000000001")
			_ = e.conn.Exec(context.Background(), "DROP TABLE "+other+"_x0000000000000001")
		}
		churned <- n
	}()
	defer func() {
		stop.Store(true)
		if n := <-churned; n < 20 {
			t.Errorf("the other target's lock was taken and given back %d times, too few to test anything", n)
		}
	}()
	// An empty lock aside (a holder whose rows a restart emptied) is read
	// through system.tables (its creation time).
	if err := e.conn.Exec(context.Background(), "CREATE TABLE "+e.db+"."+target.AsideName(e.m, "00000000000000ee")+
		" (holder String, host String, pid UInt32, beat DateTime) ENGINE = Memory"); err != nil {
		t.Fatal(err)
	}
	tbl := e.lockedTable()
	l := &target.Lock{Table: tbl, ID: target.NewHolderID(), Timing: testLockTiming, Name: mapping.Qualified(e.db, mapping.LockName(e.m))}
	ctx := context.Background()
	for i := range 200 {
		if _, found, err := tbl.Describe(ctx, e.db, e.m.Target.Table); err != nil || !found {
			t.Fatalf("read %d of the target's engine: found %v, %v", i, found, err)
		}
		if _, found, err := l.Holder(ctx, target.AsideName(e.m, "00000000000000ee")); err != nil || !found {
			t.Fatalf("read %d of an empty lock: found %v, %v", i, found, err)
		}
		if names, err := l.Asides(ctx, mapping.LockName(e.m)+"_x"); err != nil || len(names) != 1 {
			t.Fatalf("list %d of the locks aside: %v, %v", i, names, err)
		}
	}
	for i := range 10 {
		cfg := e.config(writeFile(t, "changes.ion", encode(t, false, orderEvent(1, int64(10), int64(500+i), "new", int64(100+i), false))))
		if _, err := testApply(ctx, cfg); err != nil {
			t.Fatalf("apply %d: %v", i, err)
		}
	}
}

// TestSystemTablesRereads: a read of system.tables that fails as 18.16
// fails it under another table's RENAME or DROP is read again; one that
// keeps failing that way is transient and says why, not "run setup
// first"; any other failure is returned at once, classified.
func TestSystemTablesRereads(t *testing.T) {
	tg := &target.Server{M: loadMapping(t, ordersMapping)}
	raced := &clickhouse.Exception{Code: target.ChUnknownTable, Message: "Table shop.other_cdc_lock doesn't exist."}
	for _, tc := range []struct {
		name  string
		fails int // reads that fail before one succeeds (-1: all)
		err   error
		reads int
		kind  outcome.Kind
		says  string
	}{
		{"a race, then an answer", 3, raced, 4, outcome.OK, ""},
		{"a race every time", -1, raced, 20, outcome.Transient,
			"read the engine of x: code: 60, message: Table shop.other_cdc_lock doesn't exist. (ClickHouse failed to list the tables " +
				"while others were renamed or dropped: database default, 20 times in a row)"},
		{"a file of another table gone", 1, &clickhouse.Exception{Code: target.ChFileDoesntExist, Message: "Cannot open file"}, 2, outcome.OK, ""},
		{"another failure", -1, &clickhouse.Exception{Code: target.ChAccessDenied, Message: "Not enough privileges."}, 1, outcome.Config,
			"read the engine of x: code: 497, message: Not enough privileges. (the ClickHouse user may not do this here)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reads := 0
			err := tg.SystemTables(context.Background(), "read the engine of x", func() error {
				reads++
				if tc.fails < 0 || reads <= tc.fails {
					return tc.err
				}
				return nil
			})
			if reads != tc.reads {
				t.Errorf("%d reads, want %d", reads, tc.reads)
			}
			if got := outcome.Classify(err); got != tc.kind {
				t.Errorf("class %s, want %s: %v", got, tc.kind, err)
			}
			if tc.says != "" && (err == nil || !strings.Contains(err.Error(), tc.says)) {
				t.Errorf("error %v\nwant it to say %q", err, tc.says)
			}
			if errors.Is(err, target.ErrNotSetUp) {
				t.Errorf("a race reported as a missing table: %v", err)
			}
		})
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
