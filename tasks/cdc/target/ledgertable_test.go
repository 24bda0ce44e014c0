package target

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
)

// ledgersOf returns the three ledgers of database db on s: the ledger of
// the shipped orders mapping's target (moved to db), the sync ledger and
// the load ledger.
func ledgersOf(t *testing.T, s *Server, db string) []*ledgerTable {
	t.Helper()
	m, err := mapping.Load("../../../flows/orders.mapping.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m.Target.Database = db
	return []*ledgerTable{targetLedger(s, m), s.SyncLedger(db).l, s.LoadLedger(db).l}
}

// TestLedgerTablesGolden: the CREATE statement of each ledger, pinned:
// a change to a ledger's columns, types or sorting key shows here first.
func TestLedgerTablesGolden(t *testing.T) {
	var stmts []string
	for _, l := range ledgersOf(t, &Server{}, "default") {
		stmts = append(stmts, l.createSQL())
	}
	got := strings.Join(stmts, ";\n\n") + ";\n"
	path := filepath.Join("testdata", "ledgers.golden")
	if *update {
		testenv.WriteFile(t, path, []byte(got), 0o644)
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run TestLedgerTablesGolden -update)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (go test -run TestLedgerTablesGolden -update rewrites it):\n%s", path, got)
	}
}

// TestLedgerTable: each ledger is made once (ensure is idempotent), with
// its columns, the stamp filled by the server, and its sorting key; a
// table of its name whose columns are not the ledger's is refused, naming
// the column; a ledger that lacks a column a later changesink added gets
// it, its older rows reading the type's default.
func TestLedgerTable(t *testing.T) {
	url := testenv.ClickHouseURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := Connect(ctx, ClickHouse{URL: url, Timeout: time.Minute}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db, _ := testenv.CreateClickHouseDatabase(t, url, "cdc_ledgers_")
	wantKey := []string{"seq", "slot, seq", "slot, gen, tbl, chunk"}
	for i, l := range ledgersOf(t, s, db) {
		t.Run(l.what, func(t *testing.T) {
			for range 2 {
				if err := l.ensure(ctx); err != nil {
					t.Fatal(err)
				}
			}
			cols, err := s.columns(ctx, db, l.table)
			if err != nil {
				t.Fatal(err)
			}
			var stampDefault, key string
			if err := s.conn.QueryRow(ctx, "SELECT default_expression FROM system.columns WHERE database = ? AND table = ? AND name = ?",
				db, l.table, l.stamp).Scan(&stampDefault); err != nil {
				t.Fatal(err)
			}
			if err := s.conn.QueryRow(ctx, "SELECT sorting_key FROM system.tables WHERE database = ? AND name = ?", db, l.table).Scan(&key); err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, c := range l.cols {
				want = append(want, c[0]+" "+c[1])
			}
			var got []string
			for _, c := range cols {
				got = append(got, c.name+" "+c.typ)
			}
			if strings.Join(got, ", ") != strings.Join(want, ", ") || stampDefault != "now()" || key != wantKey[i] {
				t.Errorf("made (%s), %s DEFAULT %q, ORDER BY %s; want (%s), DEFAULT now(), ORDER BY %s",
					strings.Join(got, ", "), l.stamp, stampDefault, key, strings.Join(want, ", "), wantKey[i])
			}
		})
	}

	other, _ := testenv.CreateClickHouseDatabase(t, url, "cdc_ledgers_")
	for _, l := range ledgersOf(t, s, other) {
		t.Run(l.what+" not a ledger", func(t *testing.T) {
			if err := s.exec(ctx, "CREATE TABLE "+l.name()+" ("+l.cols[0][0]+" UInt8, "+l.cols[1][0]+" "+l.cols[1][1]+") ENGINE = MergeTree ORDER BY tuple()"); err != nil {
				t.Fatal(err)
			}
			err := l.ensure(ctx)
			testenv.WantError(t, err, outcome.Config, change.ErrTargetMismatch,
				"the "+l.what+" "+l.name()+" has no column "+l.cols[0][0]+" "+l.cols[0][1]+` (it has "UInt8")`)
		})
	}

	t.Run("a column added", func(t *testing.T) {
		l := s.LoadLedger(db).l
		old := *l
		old.table, old.cols, old.added = "_old_load", l.cols[:len(l.cols)-2], nil // before relid and detail
		if err := old.ensure(ctx); err != nil {
			t.Fatal(err)
		}
		if err := old.append(ctx, []any{"s", "g1", LoadStart, "", uint32(0), uint32(0), uint32(0), uint32(0), uint64(0), uint64(0),
			uint64(0), uint8(0), uint64(0), uint64(0), uint64(77), "id", "shop", "h"}, Fence{}, "a row"); err != nil {
			t.Fatal(err)
		}
		l.table = old.table
		ll := &LoadLedger{l: l}
		for range 2 {
			if err := ll.Ensure(ctx); err != nil {
				t.Fatal(err)
			}
		}
		rows, err := ll.Latest(ctx, "s", "")
		if err != nil || len(rows) != 1 || rows[0].StreamFrom != 77 || rows[0].Relid != 0 || rows[0].Detail != "" || rows[0].At.IsZero() {
			t.Fatalf("the row written before relid and detail were added: %+v, %v", rows, err)
		}
	})
}

// TestLoadLedger: rows appended, the latest generation of the slot's own
// load and of a joined table read back, and every table's load.
func TestLoadLedger(t *testing.T) {
	url := testenv.ClickHouseURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Connect(ctx, ClickHouse{URL: url, Timeout: time.Minute}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db, _ := testenv.CreateClickHouseDatabase(t, url, "cdc_load_")
	l := s.LoadLedger(db)
	if err := l.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if got := l.Name(); got != db+"._changesink_load" {
		t.Errorf("Name() = %s", got)
	}
	for _, r := range []LoadRow{
		{Slot: "s", Gen: "1", Kind: LoadStart, StreamFrom: 10},
		{Slot: "s", Gen: "1", Kind: LoadChunk, Table: "public.a", Chunk: 0, Step: 8, Lo: 0, Hi: 8, Point: 20, Xmin: 5, Rows: 3, Bytes: 30, Relid: 7},
		{Slot: "s", Gen: "1", Kind: LoadChunk, Table: "public.a", Chunk: 1, Step: 8, Lo: 8, Hi: 0, Point: 20, Delta: true, Rows: 1, Relid: 7},
		{Slot: "s", Gen: "2", Kind: LoadStart, Table: "public.b", StreamFrom: 30},
		{Slot: "s", Gen: "2", Kind: LoadChunk, Table: "public.b", Point: 40, Relid: 9},
		{Slot: "s", Gen: "2", Kind: LoadDone, Table: "public.b", Point: 40, Relid: 9},
		{Slot: "other", Gen: "3", Kind: LoadStart},
	} {
		if err := l.Append(ctx, r, Fence{}); err != nil {
			t.Fatal(err)
		}
	}
	own, err := l.Latest(ctx, "s", "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range own {
		got = append(got, r.Kind+" "+r.Table)
	}
	if strings.Join(got, ", ") != "start , chunk public.a, chunk public.a" || !own[2].Delta || own[1].Delta || own[2].Hi != 0 || own[1].Hi != 8 ||
		own[0].StreamFrom != 10 || own[1].Relid != 7 || own[1].Xmin != 5 || own[1].Rows != 3 || own[1].Bytes != 30 || own[0].At.IsZero() {
		t.Errorf("the slot's own load: %+v", own)
	}
	if joined, err := l.Latest(ctx, "s", "public.b"); err != nil || len(joined) != 3 || joined[0].Kind != LoadStart || joined[0].StreamFrom != 30 {
		t.Errorf("the joined table's load: %+v, %v", joined, err)
	}
	tables, err := l.Tables(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]TableLoad{"public.a": {Gen: "1", Done: true, Point: 20, Relid: 7}, "public.b": {Gen: "2", Done: true, Point: 40, Relid: 9}}
	if len(tables) != len(want) || tables["public.a"] != want["public.a"] || tables["public.b"] != want["public.b"] {
		t.Errorf("Tables = %v, want %v", tables, want)
	}
}
