package target

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/changesink/changesink/tasks/cdc/mapping"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/changesink/changesink/internal/outcome"
)

// TestSystemTablesUnderOtherDDL: ClickHouse 18.16 fails a read of
// system.tables (UNKNOWN_TABLE naming another table, or a missing metadata
// file) while another table of the database is renamed or dropped, as
// every run's lock is. Another target's runs in the same database take and
// give back their lock back to back while this target's runs take, sweep
// and give back theirs, and read the lock tables: none fails. Without the
// re-reads (systemTables) about 1 read in 20 failed, and apply exited 2
// saying "run changesink cdc setup first".
//
//changesink:per-server
func TestSystemTablesUnderOtherDDL(t *testing.T) {
	e := newEnv(t, ordersMappingFile)
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
	if err := e.conn.Exec(context.Background(), "CREATE TABLE "+e.db+"."+asideName(e.m, "00000000000000ee")+
		" (holder String, host String, pid UInt32, beat DateTime) ENGINE = Memory"); err != nil {
		t.Fatal(err)
	}
	tbl := e.lockedTable()
	l := &Lock{Table: tbl, ID: newHolderID(), Timing: testLockTiming, Name: mapping.Qualified(e.db, mapping.LockName(e.m))}
	ctx := context.Background()
	for i := range 200 {
		if _, found, err := tbl.describe(ctx, e.db, e.m.Target.Table); err != nil || !found {
			t.Fatalf("read %d of the target's engine: found %v, %v", i, found, err)
		}
		if _, found, err := l.holder(ctx, asideName(e.m, "00000000000000ee")); err != nil || !found {
			t.Fatalf("read %d of an empty lock: found %v, %v", i, found, err)
		}
		if names, err := l.asides(ctx, mapping.LockName(e.m)+"_x"); err != nil || len(names) != 1 {
			t.Fatalf("list %d of the locks aside: %v, %v", i, names, err)
		}
	}
	// Runs of this target, doing to the catalog what an apply does: check
	// the target's schema, take the lock, sweep the locks left aside and
	// give the lock back.
	for i := range 10 {
		l := mustLock(t, e.lockedTable(), testLockTiming)
		if err := l.SweepAsides(ctx, slog.New(slog.DiscardHandler)); err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
	}
}

// TestSystemTablesRereads: a read of system.tables that fails as 18.16
// fails it under another table's RENAME or DROP is read again; one that
// keeps failing that way is transient and says why, not "run setup
// first"; any other failure is returned at once, classified.
func TestSystemTablesRereads(t *testing.T) {
	tg := &Server{M: loadMapping(t, ordersMappingFile)}
	raced := &clickhouse.Exception{Code: chUnknownTable, Message: "Table shop.other_cdc_lock doesn't exist."}
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
		{"a file of another table gone", 1, &clickhouse.Exception{Code: chFileDoesntExist, Message: "Cannot open file"}, 2, outcome.OK, ""},
		{"another failure", -1, &clickhouse.Exception{Code: chAccessDenied, Message: "Not enough privileges."}, 1, outcome.Config,
			"read the engine of x: code: 497, message: Not enough privileges. (the ClickHouse user may not do this here)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reads := 0
			err := tg.systemTables(context.Background(), "read the engine of x", func() error {
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
			if errors.Is(err, ErrNotSetUp) {
				t.Errorf("a race reported as a missing table: %v", err)
			}
		})
	}
}
