package cdc

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"

	"github.com/changesink/changesink/internal/iongen"
	"github.com/changesink/changesink/internal/outcome"
)

// ordersInsertSQL is the insert of a batch's rows into the orders target of
// database DB, as target renders it (target/testdata/sql_orders_*.golden):
// the proxy tests cut the connection as it is sent.
const ordersInsertSQL = "INSERT INTO DB.orders_cdc (id, customer_id, amount_cents, status, _cdc_lsn, _cdc_deleted)"

// TestApplyClickHouseGoesAway stops the server (a proxy in front of it)
// before the insert and before the verify: each run fails with a transient
// error and leaves no output file; a later run converges.
//
//changesink:per-server
func TestApplyClickHouseGoesAway(t *testing.T) {
	for _, when := range []string{"before the insert", "during the insert", "after the insert"} {
		t.Run(when, func(t *testing.T) {
			e := newEnv(t, ordersMapping)
			p, path, cfg := e.proxiedOrders()
			if when == "during the insert" {
				p.CutOn(e.onWire(strings.ReplaceAll(ordersInsertSQL, "DB.", mapping.QuoteIdent(e.db)+"."))) // the batch's insert, not the lock's or the ledger's
			} else {
				setHook(t, &cfg, when, func(context.Context) error { p.Close(); return nil })
			}
			res, err := testApply(context.Background(), cfg)
			if err == nil {
				t.Fatalf("Apply succeeded with the server gone: %v", res.Outputs())
			}
			checkError(t, err, outcome.Transient, nil)
			var re *change.RecordError
			if errors.As(err, &re) {
				t.Errorf("a lost server reported as a record fault: %v", err)
			}
			t.Logf("error: %v", err)
			noOutputs(t, cfg)
			// The batch is one INSERT block, one part: a cut before or
			// during the insert leaves none of its rows, after it all; the
			// ledger records only a verified batch.
			wantRows := map[string]string{"before the insert": "0", "during the insert": "0", "after the insert": "2"}[when]
			if n := e.query("SELECT count() FROM " + e.db + ".orders_cdc"); n[0] != wantRows {
				t.Errorf("%s rows after a cut %s, want %s", n[0], when, wantRows)
			}
			if n := e.query("SELECT count() FROM " + e.db + ".orders_cdc_ledger WHERE kind = 'batch'"); n[0] != "0" {
				t.Errorf("the cut run wrote %s ledger rows", n[0])
			}

			res, err = testApply(context.Background(), e.config(path))
			if err != nil {
				t.Fatal(err)
			}
			if res.Verified != 2 {
				t.Errorf("re-run outputs %v", res.Outputs())
			}
			if n := e.query("SELECT count() FROM " + e.db + ".orders_cdc_ledger WHERE kind = 'batch'"); n[0] != "1" {
				t.Errorf("%s ledger rows after the re-run, want 1", n[0])
			}
			if got := e.query("SELECT name FROM system.tables WHERE database = ? AND name LIKE 'orders_cdc_lock%'", e.db); len(got) != 0 {
				t.Errorf("lock tables left: %v", got)
			}
		})
	}
}

// TestApplyOnAFrozenServer freezes the server (a proxy that stops passing
// bytes and still accepts connections, as a server stopped with SIGSTOP
// does) at four points of a run. The run fails transient after the call
// that waited out CDC_CLICKHOUSE_TIMEOUT and at most releaseWithin more to
// give the lock back: a run once waited out a timeout per call it made
// after the freeze (four timeouts measured, once seven), because
// clickhouse-go reads a new connection's hello under its own dial timeout,
// not the call's context, and a failed ledger read was asked about again.
// After the thaw a re-run converges.
//
//changesink:per-server
func TestApplyOnAFrozenServer(t *testing.T) {
	const timeout = 3 * time.Second
	for _, when := range []string{"from the start", "locked", "before the insert", "after the insert", "after the ledger row"} {
		t.Run(when, func(t *testing.T) {
			e := newEnv(t, ordersMapping)
			p, path, cfg := e.proxiedOrders()
			cfg.ClickHouse.Timeout = timeout
			var froze time.Time
			freeze := func(context.Context) error { p.Freeze(); froze = time.Now(); return nil }
			// The call that waits, then (once the lock is held) its release.
			bound := timeout + min(timeout, 10*time.Second)
			switch when {
			case "from the start":
				_ = freeze(context.Background())
				bound = timeout
			case "after the ledger row": // only the release waits
				bound = min(timeout, 10*time.Second)
				fallthrough
			default:
				setHook(t, &cfg, when, freeze)
			}
			res, err := testApply(context.Background(), cfg)
			waited := time.Since(froze)
			p.Thaw()
			t.Logf("failed %s after the freeze: %v", waited.Round(10*time.Millisecond), err)
			if err == nil {
				t.Fatalf("Apply succeeded on a frozen server: %v", res.Outputs())
			}
			checkError(t, err, outcome.Transient, nil, "ClickHouse was unreachable, too slow or dropped the connection")
			if when == "after the ledger row" {
				checkError(t, err, outcome.Transient, nil, "the batch is applied, verified and recorded in the ledger, but giving back the lock failed")
			}
			// The claim is in whole timeouts: no call after the first waits
			// out another one (the waits are timers; the rest is slack for
			// a loaded machine).
			if waited >= bound+timeout {
				t.Errorf("the run failed %s after the freeze, want about %s (the call that waited, and giving the lock back): %v",
					waited.Round(100*time.Millisecond), bound, err)
			}
			noOutputs(t, cfg)

			// A lock an earlier run left renamed aside an hour ago: the
			// re-run, once it holds the lock, drops it.
			aside := mapping.LockName(e.m) + "_x00000000000000aa" // a holder's lock renamed aside
			left := mapping.Qualified(e.db, aside)
			if err := e.conn.Exec(context.Background(), "CREATE TABLE "+left+
				" ENGINE = Memory AS SELECT 'gone' AS holder, 'host' AS host, toUInt32(7) AS pid, now() - 3600 AS beat"); err != nil {
				t.Fatal(err)
			}
			res, err = testApply(context.Background(), e.config(path))
			if err != nil {
				t.Fatalf("re-run after the thaw: %v", err)
			}
			if got := e.query("SELECT name FROM system.tables WHERE database = ? AND name = ?", e.db, aside); len(got) != 0 {
				t.Errorf("the re-run left %s", left)
			}
			if res.Verified != 2 {
				t.Errorf("re-run outputs %v", res.Outputs())
			}
			if n := e.query("SELECT count() FROM " + e.db + ".orders_cdc_ledger WHERE kind = 'batch'"); n[0] != "1" {
				t.Errorf("%s ledger rows after the re-run, want 1", n[0])
			}
		})
	}
}

// TestStopWhileGivingBackTheLock: a run stopped (SIGTERM) once its batch
// is recorded, while it gives the lock back to a server that stopped
// answering, says the batch is in and recorded, not that its ledger row
// may be missing; the re-run is a replay.
//
//changesink:per-server
func TestStopWhileGivingBackTheLock(t *testing.T) {
	e := newEnv(t, ordersMapping)
	p, path, cfg := e.proxiedOrders()
	cfg.ClickHouse.Timeout = 2 * time.Second
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	setHook(t, &cfg, "after the ledger row", func(context.Context) error { p.Freeze(); stop(); return nil })
	_, err := testApply(ctx, cfg)
	p.Thaw()
	checkError(t, err, outcome.Transient, errNotReleased, "the batch is applied, verified and recorded in the ledger, but giving back the lock failed "+
		"(stopped meanwhile, a stop signal, SIGTERM or SIGINT, or the task's timeout; waited up to 2s)")
	if strings.Contains(err.Error(), "ledger row may be missing") {
		t.Errorf("the message doubts the ledger row the run wrote: %v", err)
	}
	noOutputs(t, cfg)
	e.replays(path, 2)
}

// TestApplyCutAtEveryStatement cuts the connection as apply sends each of
// its statements in turn (the lock, the ledger, the reads, the insert, the
// verify, the ledger row, the release), on a target that holds an earlier
// batch: every cut run fails transient (exit 3) and publishes no output
// file; the target holds the earlier batch or the whole new one; and a
// re-run (which breaks a lock the cut left) converges to the same rows as
// an uncut run, with one ledger row per batch and no lock left.
//
//changesink:per-server
func TestApplyCutAtEveryStatement(t *testing.T) {
	first := []any{
		orderEvent(1, int64(10), int64(500), "new", int64(100), false),
		orderEvent(2, int64(20), int64(700), "new", int64(101), false),
	}
	batches := []struct {
		name   string
		second []any
		want   string
	}{
		{"plain", []any{
			orderEvent(1, int64(10), int64(550), "paid", int64(200), false),
			orderEvent(2, int64(20), int64(700), "", int64(201), true),
			orderEvent(3, int64(30), int64(900), "new", int64(202), false),
		}, `{"id":1,"customer_id":10,"amount_cents":550,"status":"paid"}` + "\n" + `{"id":3,"customer_id":30,"amount_cents":900,"status":"new"}` + "\n"},
		// A TRUNCATE deletes the target's keys 1 and 2 (markers in the same insert).
		{"truncate", []any{
			iongen.Event(iongen.Struct{}, true, iongen.Metadata("TRUNCATE", iongen.Source("shop", "public", "orders", int64(200), 5, "false"))),
			createEvent(orderRow(3, int64(30), int64(900), "paid"), 202),
		}, `{"id":3,"customer_id":30,"amount_cents":900,"status":"paid"}` + "\n"},
	}
	probe := loadMapping(t, ordersMapping)
	probe.Target.Database = "DB"
	lock := mapping.Qualified("DB", mapping.LockName(probe))
	ledger := mapping.Qualified("DB", mapping.LedgerName(probe))
	cuts := []struct{ name, sql string }{
		{"lock create", "CREATE TABLE " + lock},
		{"ledger create", "CREATE TABLE IF NOT EXISTS " + ledger},
		{"ledger read", "SELECT seq, kind, digest, applied_at, holder, "}, // its whole rows
		{"versions read", "SELECT id, _cdc_lsn, _cdc_deleted\nFROM DB.orders_cdc FINAL\nPREWHERE id IN (SELECT k0 FROM _cdc_keys)"},
		{"insert", ordersInsertSQL},
		{"insert data", "paid"}, // a value of the batch's block: the server got the query, not the whole block
		{"verify read", "SELECT id, customer_id, amount_cents, status, _cdc_lsn, _cdc_deleted\nFROM DB.orders_cdc FINAL\nPREWHERE id IN (SELECT k0 FROM _cdc_keys)"},
		{"lock check", "SELECT count() FROM " + lock + " WHERE holder = "},
		{"ledger row", "INSERT INTO " + ledger},
		{"release", "RENAME TABLE " + lock},
		{"release drop", "DROP TABLE IF EXISTS " + lock + "_x"},
		{"truncated keys read", "SELECT id FROM DB.orders_cdc FINAL WHERE _cdc_deleted = 0 AND _cdc_lsn < "},
	}
	for _, bt := range batches {
		for _, c := range cuts {
			if c.name == "truncated keys read" && bt.name != "truncate" {
				continue
			}
			second, want := bt.second, bt.want
			t.Run(bt.name+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				e := newEnv(t, ordersMapping)
				e.setup()
				if _, _, err := e.apply(false, first...); err != nil {
					t.Fatal(err)
				}
				batchRows := "2"
				if c.name == "ledger create" {
					// apply creates the ledger only when it has no row (a
					// target the seed flow made, one set up before the
					// ledger): empty it, so the cut run sends the CREATE.
					// The re-run then starts the ledger with a baseline.
					if err := e.conn.Exec(context.Background(), "TRUNCATE TABLE "+mapping.Qualified(e.db, mapping.LedgerName(e.m))); err != nil {
						t.Fatal(err)
					}
					batchRows = "1"
				}
				before := e.liveJSON()
				p, viaProxy := e.proxied()
				path := writeFile(t, "changes.ion", encode(t, true, second...))
				cfg := e.config(path)
				cfg.ClickHouse.URL = viaProxy
				p.CutOn(e.onWire(strings.ReplaceAll(c.sql, "DB.", mapping.QuoteIdent(e.db)+".")))
				res, err := testApply(context.Background(), cfg)
				select {
				case <-p.Done():
				default:
					t.Fatalf("the statement was never sent (err %v); cut on %q", err, c.sql)
				}
				if err == nil {
					t.Fatalf("Apply succeeded with the server gone: %v", res.Outputs())
				}
				checkError(t, err, outcome.Transient, nil)
				// The message names the step of a read: before the insert
				// nothing was written; the read-back comes after it.
				switch c.name {
				case "versions read":
					checkError(t, err, outcome.Transient, nil, "read the target's rows before the insert: read "+e.db+".orders_cdc")
				case "verify read":
					checkError(t, err, outcome.Transient, nil, "read back after the insert: read "+e.db+".orders_cdc")
				}
				if strings.HasPrefix(c.name, "release") {
					// Cut after the ledger row: the message says the batch is in.
					checkError(t, err, outcome.Transient, nil, "applied, verified and recorded in the ledger", "Re-run the batch")
				}
				cutErr := err
				noOutputs(t, cfg)
				got0 := e.liveJSON()
				if got0 != before && got0 != want {
					t.Errorf("after the cut the live view holds part of the batch:\n%s", got0)
				}
				res, _, err = e.apply(false, second...)
				if err != nil {
					t.Fatalf("re-run: %v", err)
				}
				// 3 keys; after a cut once the insert landed, a TRUNCATE's keys
				// are no longer live in the target: no markers, only key 3.
				if res.Verified != 3 && !(bt.name == "truncate" && res.Verified == 1 && got0 == want) {
					t.Errorf("re-run outputs %v, want 3 keys verified", res.Outputs())
				}
				if got := e.liveJSON(); got != want {
					t.Errorf("live rows after the re-run\n%s\nwant\n%s", got, want)
				}
				if n := e.query("SELECT count() FROM " + mapping.Qualified(e.db, mapping.LedgerName(e.m)) + " WHERE kind = 'batch'"); n[0] != batchRows {
					t.Errorf("%s ledger rows after the re-run, want %s", n[0], batchRows)
				}
				left := e.query("SELECT name FROM system.tables WHERE database = ? AND name LIKE 'orders_cdc_lock%'", e.db)
				if c.name == "release drop" && len(left) == 1 {
					// Cut while dropping its renamed lock: the table is left,
					// and the message names it and how to drop it.
					drop := "DROP TABLE IF EXISTS " + mapping.Qualified(e.db, left[0])
					if !strings.Contains(cutErr.Error(), drop) {
						t.Errorf("the message does not say %q: %v", drop, cutErr)
					}
					if err := e.conn.Exec(context.Background(), drop); err != nil {
						t.Fatal(err)
					}
					left = nil
				}
				if len(left) != 0 {
					t.Errorf("lock tables left: %v", left)
				}
			})
		}
	}
}
