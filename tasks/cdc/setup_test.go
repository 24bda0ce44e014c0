package cdc

// Tests of cdc setup: it is idempotent, creates what the server supports,
// and refuses targets that are not what the mapping describes.

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/target"

	"github.com/changesink/changesink/internal/outcome"
)

// TestSetupExistingTableMissingColumn: setup against an existing
// table that lacks a mapped column (or a view where the table should be)
// ran CREATE VIEW before checking the table, and ClickHouse's "Unknown
// identifier" came out as an internal error (exit 4). It must be the
// schema check's ErrTargetMismatch naming the column (exit 2), and create
// no view.
//
//changesink:per-server
func TestSetupExistingTableMissingColumn(t *testing.T) {
	for name, ddl := range map[string]string{
		"missing column": "CREATE TABLE %s.orders_cdc (id Int64, customer_id Int64, amount_cents Int64, _cdc_lsn UInt64, _cdc_deleted UInt8) " +
			"ENGINE = ReplacingMergeTree(_cdc_lsn) ORDER BY id",
		"a view": "CREATE VIEW %s.orders_cdc AS SELECT 1 AS id",
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, ordersMapping)
			if err := e.conn.Exec(context.Background(), strings.ReplaceAll(ddl, "%s", e.db)); err != nil {
				t.Fatal(err)
			}
			_, err := testSetup(context.Background(), e.config(""))
			wantError(t, err, outcome.Config, change.ErrTargetMismatch)
			if name == "missing column" && !strings.Contains(err.Error(), `"status"`) {
				t.Errorf("error does not name the missing column: %v", err)
			}
			if got := e.query("SELECT count() FROM system.tables WHERE database = ? AND name = 'orders_live'", e.db); got[0] != "0" {
				t.Errorf("the live view was created over a mismatched table")
			}
		})
	}
}

// TestSetupDecimal256: a Decimal with more than 38 digits is
// Decimal256, which ClickHouse accepts from 21.6 (20.8 behind a setting);
// on 18.16 setup failed with the server's "Wrong precision" as an internal
// error (exit 4). Like DateTime64 it is ErrUnsupportedServer (exit 2).
//
//changesink:per-server
func TestSetupDecimal256(t *testing.T) {
	if !mapping.CapsFor(21, 6).Decimal256 || mapping.CapsFor(21, 5).Decimal256 || !mapping.CapsFor(26, 9).Decimal256 {
		t.Errorf("Decimal256 capability: 21.5 %v, 21.6 %v, 26.9 %v", mapping.CapsFor(21, 5).Decimal256, mapping.CapsFor(21, 6).Decimal256, mapping.CapsFor(26, 9).Decimal256)
	}
	e := newEnv(t, ordersMapping)
	m, err := mapping.Parse("wide.yaml", []byte("source: {database: shop, schema: public, table: t}\n"+
		"target: {database: "+e.db+", table: wide}\nkey: [id]\n"+
		"columns: [{name: id, type: Int64}, {name: amount, type: \"Decimal(76, 2)\"}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	e.m = m
	caps := e.caps()
	_, err = testSetup(context.Background(), e.config(""))
	if caps.Decimal256 {
		if err != nil {
			t.Fatalf("Setup on a server with Decimal256: %v", err)
		}
		return
	}
	wantError(t, err, outcome.Config, change.ErrUnsupportedServer, `column "amount"`)
}

// TestSetupStaleLiveView: after a column is added (to the mapping and
// the table, as the runbook says for "source columns changed"), setup kept
// the old live view (CREATE VIEW IF NOT EXISTS) and reported it "in place"
// without the new column; a table squatting the view's name passed too.
// Setup checks that the live view is a view over the mapping's columns.
//
//changesink:per-server
func TestSetupStaleLiveView(t *testing.T) {
	e := newEnv(t, ordersMapping)
	e.setup()
	if err := e.conn.Exec(context.Background(), "ALTER TABLE "+e.db+".orders_cdc ADD COLUMN note Nullable(String) AFTER status"); err != nil {
		t.Fatal(err)
	}
	wider, err := mapping.Parse("wider.yaml", []byte("source: {database: shop, schema: public, table: orders}\n"+
		"target: {database: "+e.db+", table: orders_cdc, live_view: orders_live}\nkey: [id]\ncolumns:\n"+
		"  - {name: id, type: Int64}\n  - {name: customer_id, type: Int64}\n  - {name: amount_cents, type: Int64}\n"+
		"  - {name: status, type: String, max_length: 32}\n  - {name: note, type: Nullable(String)}\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := e.config("")
	cfg.Mapping = wider
	_, err = testSetup(context.Background(), cfg)
	wantError(t, err, outcome.Config, change.ErrTargetMismatch, "orders_live")
	t.Log(err)
	// Dropping the view, as the message says, lets setup make the new one.
	if err := e.conn.Exec(context.Background(), "DROP TABLE "+e.db+".orders_live"); err != nil {
		t.Fatal(err)
	}
	if _, err := testSetup(context.Background(), cfg); err != nil {
		t.Fatalf("Setup after dropping the view: %v", err)
	}
	if got := e.query("SELECT name FROM system.columns WHERE database = ? AND table = 'orders_live'", e.db); strings.Join(got, ",") != "id,customer_id,amount_cents,status,note" {
		t.Errorf("view columns %v", got)
	}

	// A table where the view should be.
	e2 := newEnv(t, ordersMapping)
	if err := e2.conn.Exec(context.Background(), "CREATE TABLE "+e2.db+".orders_live (id Int64, customer_id Int64, amount_cents Int64, status String) ENGINE = Memory"); err != nil {
		t.Fatal(err)
	}
	_, err = testSetup(context.Background(), e2.config(""))
	if !errors.Is(err, change.ErrTargetMismatch) || !strings.Contains(err.Error(), "orders_live") {
		t.Fatalf("a Memory table as the live view: %v, want ErrTargetMismatch", err)
	}
}

// TestSetupNoDatabase: setup of a mapping whose database does not exist
// (and target.create_database is off) said "run changesink cdc setup
// first" — to setup itself. It is ErrNoDatabase (exit 2), naming the
// database and both ways out, and creates nothing.
//
//changesink:per-server
func TestSetupNoDatabase(t *testing.T) {
	e := newEnv(t, ordersMapping)
	e.m.Target.Database = e.db + "_absent"
	_, err := testSetup(context.Background(), e.config(""))
	wantError(t, err, outcome.Config, change.ErrNoDatabase)
	checkError(t, err, outcome.Config, change.ErrNoDatabase, e.db+"_absent", "CREATE DATABASE", "create_database: true")
	if strings.Contains(err.Error(), "run changesink cdc setup") {
		t.Errorf("setup tells the user to run setup: %v", err)
	}
	if got := e.query("SELECT count() FROM system.databases WHERE name = ?", e.m.Target.Database); got[0] != "0" {
		t.Errorf("setup created the database")
	}
}

// TestSetupAfterTheTableWasDropped: with the target table dropped by hand
// and its ledger left, apply says "run changesink cdc setup first", and
// setup made a new empty table under a ledger that records batches as
// applied: later batches applied over it and the live view silently lacked
// every key they did not touch. Setup refuses that (exit 2, naming the
// ledger's last row and the rebuild) and creates nothing; without a ledger,
// with an empty one, or after the whole rebuild it makes the table.
func TestSetupAfterTheTableWasDropped(t *testing.T) {
	for _, tc := range []struct {
		name    string
		drop    []string // after a batch is applied; %s is the database
		refused bool
	}{
		{"table only", []string{"DROP TABLE %s.orders_cdc"}, true},
		{"table and view", []string{"DROP TABLE %s.orders_cdc", "DROP TABLE %s.orders_live"}, true},
		{"table, emptied ledger", []string{"DROP TABLE %s.orders_cdc", "ALTER TABLE %s.orders_cdc_ledger DELETE WHERE 1"}, false},
		{"the rebuild: table, ledger and view", []string{"DROP TABLE %s.orders_cdc", "DROP TABLE %s.orders_cdc_ledger", "DROP TABLE %s.orders_live"}, false},
		{"ledger only", []string{"DROP TABLE %s.orders_cdc_ledger"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, ordersMapping)
			e.setup()
			if _, _, err := e.apply(true, orderEvent(1, int64(7), int64(100), "new", int64(1000), false),
				orderEvent(2, int64(8), int64(200), "new", int64(1100), false)); err != nil {
				t.Fatalf("apply: %v", err)
			}
			for _, s := range tc.drop {
				// mutations_sync does not exist on 18.16: an ALTER DELETE
				// runs in the background, so wait for the ledger to empty.
				if err := e.conn.Exec(context.Background(), strings.ReplaceAll(s, "%s", e.db)); err != nil {
					t.Fatal(err)
				}
			}
			for i := 0; strings.Contains(tc.name, "emptied") && e.query("SELECT count() FROM " + e.db + ".orders_cdc_ledger")[0] != "0"; i++ {
				if i == 200 {
					t.Fatal("the ledger did not empty")
				}
				time.Sleep(50 * time.Millisecond)
			}
			_, err := testSetup(context.Background(), e.config(""))
			exists := e.query("SELECT count() FROM system.tables WHERE database = ? AND name = 'orders_cdc'", e.db)[0]
			if !tc.refused {
				if err != nil {
					t.Fatalf("Setup: %v", err)
				}
				if exists != "1" {
					t.Errorf("setup did not make the table")
				}
				return
			}
			wantError(t, err, outcome.Config, change.ErrOrphanLedger)
			checkError(t, err, outcome.Config, change.ErrOrphanLedger, e.db+".orders_cdc_ledger row 1", "does not exist",
				"drop the _ledger and the live view", "new snapshot", "Restore the table")
			if exists != "0" {
				t.Errorf("setup made a new table under a ledger of applied batches")
			}
		})
	}
}

// TestApplyChecksTheLiveView: apply checked the table but not the live
// view: with the view dropped it applied the batch, exited 0 and sent
// readers to query a view that did not exist; a table or a view of other
// columns in its place passed too. A missing view is made again (a WARN
// line says so); a wrong object is ErrTargetMismatch (exit 2) and nothing
// is written.
//
//changesink:per-server
func TestApplyChecksTheLiveView(t *testing.T) {
	for _, tc := range []struct {
		name string
		ddl  []string // %s is the database
		ok   bool
	}{
		{"dropped", []string{"DROP TABLE %s.orders_live"}, true},
		{"a table in its place", []string{"DROP TABLE %s.orders_live",
			"CREATE TABLE %s.orders_live (id Int64, customer_id Int64, amount_cents Int64, status String) ENGINE = Memory"}, false},
		{"a view of other columns", []string{"DROP TABLE %s.orders_live", "CREATE VIEW %s.orders_live AS SELECT id FROM %s.orders_cdc"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, ordersMapping)
			e.setup()
			for _, s := range tc.ddl {
				if err := e.conn.Exec(context.Background(), strings.ReplaceAll(s, "%s", e.db)); err != nil {
					t.Fatal(err)
				}
			}
			var logs bytes.Buffer
			cfg := e.config(writeFile(t, "changes.ion", encode(t, true, orderEvent(1, int64(7), int64(100), "new", int64(1000), false))))
			cfg.Log = slog.New(slog.NewTextHandler(&logs, nil))
			_, err := testApply(context.Background(), cfg)
			if !tc.ok {
				wantError(t, err, outcome.Config, change.ErrTargetMismatch, e.db+".orders_live")
				if got := e.query("SELECT count() FROM " + e.db + ".orders_cdc")[0]; got != "0" {
					t.Errorf("%s rows written past a wrong live view", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if got := e.query("SELECT id, status FROM " + e.db + ".orders_live"); strings.Join(got, ";") != "1\tnew" {
				t.Errorf("live view rows %q", got)
			}
			if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), e.db+".orders_live was missing") {
				t.Errorf("no WARN line about the view: %q", logs.String())
			}
		})
	}
}

// TestReadonlyUser: a user that may not write (readonly, as a profile or
// CLICKHOUSE_URL's query string sets it; 18.16 has no GRANT) failed setup
// and apply with ClickHouse's bare "Cannot create table in readonly mode":
// the right class (exit 2) but no word of what to check. The message says
// what the user needs and where readonly is set; nothing is written.
//
//changesink:per-server
func TestReadonlyUser(t *testing.T) {
	e := newEnv(t, ordersMapping)
	e.setup()
	batch := writeFile(t, "changes.ion", encode(t, true, orderEvent(1, int64(7), int64(100), "new", int64(1000), false)))
	for _, ro := range []string{"1", "2"} {
		for _, cmd := range []string{"setup", "apply"} {
			t.Run(cmd+" readonly="+ro, func(t *testing.T) {
				cfg := e.config(batch)
				sep := "?"
				if strings.Contains(cfg.ClickHouse.URL, "?") {
					sep = "&"
				}
				cfg.ClickHouse.URL += sep + "readonly=" + ro
				var err error
				if cmd == "setup" {
					_, err = testSetup(context.Background(), cfg)
				} else {
					_, err = testApply(context.Background(), cfg)
				}
				wantError(t, err, outcome.Config, target.ErrNotAllowed)
				checkError(t, err, outcome.Config, nil, "readonly mode", "INSERT", "CREATE TABLE", "CLICKHOUSE_URL's query string", "CLICKHOUSE_USERNAME")
			})
		}
	}
	if got := e.query("SELECT count() FROM " + e.db + ".orders_cdc")[0]; got != "0" {
		t.Errorf("%s rows written by a readonly user", got)
	}
	if got := e.query("SELECT count() FROM system.tables WHERE database = ? AND name NOT IN ('orders_cdc', 'orders_cdc_ledger', 'orders_live')", e.db)[0]; got != "0" {
		t.Errorf("%s other tables left (a lock?)", got)
	}
}

//changesink:per-server
func TestSetupIdempotentAndChecked(t *testing.T) {
	e := newEnv(t, ordersMapping)
	for range 2 {
		res, err := testSetup(context.Background(), e.config(""))
		if err != nil {
			t.Fatalf("Setup: %v", err)
		}
		if res.Table != e.db+".orders_cdc" || res.View != e.db+".orders_live" || len(res.Statements) != 3 {
			t.Errorf("result %+v", res)
		}
	}
	engine := "ReplacingMergeTree(_cdc_lsn) ORDER BY id"
	if e.caps().IsDeleted {
		engine = "ReplacingMergeTree(_cdc_lsn, _cdc_deleted) ORDER BY id"
	}
	if got := e.query("SELECT engine_full FROM system.tables WHERE database = ? AND name = 'orders_cdc'", e.db); !strings.HasPrefix(got[0], engine) {
		t.Errorf("engine %s, want %s", got, engine)
	}

	// A mapping that disagrees with the existing table is a config error.
	for name, edit := range map[string]func(m *mapping.Mapping){
		"type":    func(m *mapping.Mapping) { m.Cols[3].Type = mapping.Type{Kind: mapping.KindInt, Bits: 64} },
		"key":     func(m *mapping.Mapping) { m.Key = []string{"customer_id"}; m.KeyIdx = []int{1} },
		"version": func(m *mapping.Mapping) { m.Target.VersionColumn = "_cdc_version" },
	} {
		t.Run(name, func(t *testing.T) {
			m := *e.m
			m.Cols = append([]mapping.Col(nil), e.m.Cols...)
			edit(&m)
			cfg := e.config("")
			cfg.Mapping = &m
			_, err := testSetup(context.Background(), cfg)
			wantError(t, err, outcome.Config, change.ErrTargetMismatch)
		})
	}

	// create_database: true creates the database.
	m := loadMapping(t, ordersMapping)
	m.Target.Database, m.Target.CreateDatabase = e.db+"_made", true
	cfg := e.config("")
	cfg.Mapping = m
	t.Cleanup(func() { _ = e.conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+m.Target.Database) })
	res, err := testSetup(context.Background(), cfg)
	if err != nil || len(res.Statements) != 4 || !strings.HasPrefix(res.Statements[0], "CREATE DATABASE IF NOT EXISTS ") {
		t.Fatalf("Setup with create_database: %+v, %v", res, err)
	}
}

// TestSetupDateTime64: DateTime64 columns are a configuration error
// (ErrUnsupportedServer) on a server without them (18.16); on a newer one
// they are created, and a row of every type applies, is verified and holds
// each DateTime64 (precisions 3 and 6) to its last digit.
//
//changesink:per-server
func TestSetupDateTime64(t *testing.T) {
	e := newEnv(t, "testdata/types_current.mapping.yaml")
	caps := e.caps()
	_, err := testSetup(context.Background(), e.config(""))
	if caps.DateTime64 {
		if err != nil {
			t.Fatalf("Setup on a server with DateTime64: %v", err)
		}
		if _, _, err := e.apply(false, everythingEvent(everythingRow(1, true), 5)); err != nil {
			t.Fatalf("apply: %v", err)
		}
		got := e.query("SELECT toUnixTimestamp64Milli(at), toUnixTimestamp64Micro(zoned), toUnixTimestamp64Micro(local) FROM " +
			mapping.Qualified(e.db, e.m.Target.LiveView))
		if want := "1705314600123\t1705314600123456\t1705314600654321"; len(got) != 1 || got[0] != want {
			t.Errorf("the DateTime64 columns hold %q, want %q", got, want)
		}
		return
	}
	wantError(t, err, outcome.Config, change.ErrUnsupportedServer)
	checkError(t, err, outcome.Config, change.ErrUnsupportedServer, `column "at" is DateTime64(3, 'UTC'), but ClickHouse 18.16.1 has no DateTime64`)
	// Apply refuses the same way, after validating the batch.
	_, _, err = e.apply(false, everythingEvent(everythingRow(1, true), 5))
	if !errors.Is(err, change.ErrUnsupportedServer) {
		t.Errorf("Apply: %v", err)
	}
}
