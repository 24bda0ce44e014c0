package cdc

import (
	"context"
	"strings"
	"testing"

	"github.com/changesink/changesink/tasks/cdc/mapping"
)

// engineFull is the target table's engine_full.
func (e *env) engineFull() string {
	e.t.Helper()
	got := e.query("SELECT engine_full FROM system.tables WHERE database = ? AND name = ?", e.db, e.m.Target.Table)
	if len(got) != 1 {
		e.t.Fatalf("the target table: %v", got)
	}
	return got[0]
}

// deletesAndReplays applies inserts, then a batch of a delete and an
// update, checks the live view, that a replay of the second batch is a
// replay and that an older change of the deleted key is skipped; then the
// same after OPTIMIZE FINAL. It returns the keys a plain FINAL shows.
func (e *env) deletesAndReplays() []string {
	t := e.t
	if _, _, err := e.apply(false, orderEvent(1, int64(10), int64(100), "new", int64(100), false),
		orderEvent(2, int64(20), int64(200), "new", int64(101), false),
		orderEvent(3, int64(30), int64(300), "new", int64(102), false)); err != nil {
		t.Fatalf("inserts: %v", err)
	}
	second := writeFile(t, "second.ion", encode(t, false, orderEvent(2, int64(20), int64(200), "new", int64(200), true),
		orderEvent(3, int64(30), int64(301), "paid", int64(201), false)))
	if res, err := testApply(context.Background(), e.config(second)); err != nil || res.Pending != 2 || res.Deletes != 1 {
		t.Fatalf("the delete and the update: %v (%v)", err, res)
	}
	live := func(when string) {
		if got := strings.Join(e.query("SELECT id, status FROM "+mapping.Qualified(e.db, e.m.Target.LiveView)+" ORDER BY id"), "; "); got != "1\tnew; 3\tpaid" {
			t.Errorf("%s: the live view holds %q, want 1 new; 3 paid", when, got)
		}
	}
	live("after the delete")
	// Read back at the delete's version: a replay, key 2 verified as deleted.
	e.replays(second, 2)
	// An older change of the deleted key, beside a newer one of key 1: key 2 is skipped, not brought back.
	if res, _, err := e.apply(false, orderEvent(2, int64(20), int64(250), "late", int64(150), false),
		orderEvent(1, int64(10), int64(100), "new", int64(300), false)); err != nil || res.Pending != 1 || res.Skipped != 1 {
		t.Fatalf("an older change of the deleted key: %v (%v); want key 1 pending, key 2 skipped", err, res)
	}
	live("after an older change of the deleted key")
	final := e.query("SELECT id FROM " + mapping.Qualified(e.db, e.m.Target.Table) + " FINAL ORDER BY id")
	// OPTIMIZE FINAL without CLEANUP keeps the delete marker: the read-back still finds it.
	if err := e.conn.Exec(context.Background(), "OPTIMIZE TABLE "+mapping.Qualified(e.db, e.m.Target.Table)+" FINAL"); err != nil {
		t.Fatal(err)
	}
	if got := e.query("SELECT count() FROM " + mapping.Qualified(e.db, e.m.Target.Table) + " WHERE id = 2 AND _cdc_deleted = 1"); got[0] != "1" {
		t.Errorf("after OPTIMIZE FINAL: %s delete markers of key 2, want 1", got[0])
	}
	e.replays(second, 2)
	live("after OPTIMIZE FINAL")
	return final
}

// TestSetupEngineFitsTheServer: setup makes the target
// ReplacingMergeTree(_cdc_lsn, _cdc_deleted) where the server has the
// is_deleted argument (23.2+), so that a plain FINAL leaves deleted keys
// out, and ReplacingMergeTree(_cdc_lsn) before; on both the live view
// hides the delete, and changesink's own reads still see the delete marker
// and its version: a replay of the delete is a replay, and an older change
// of the deleted key is skipped. (With the is_deleted engine and reads
// through FINAL alone, the replay found the key missing and the read-back
// refused the batch.)
//
//changesink:per-server
func TestSetupEngineFitsTheServer(t *testing.T) {
	e := newEnv(t, ordersMapping)
	e.setup()
	caps := e.caps()
	want := "ReplacingMergeTree(_cdc_lsn)"
	if caps.IsDeleted {
		want = "ReplacingMergeTree(_cdc_lsn, _cdc_deleted)"
	}
	if got := e.engineFull(); !strings.HasPrefix(got, want+" ORDER BY id") {
		t.Fatalf("ClickHouse %s: the target is %s, want %s ORDER BY id", e.version(), got, want)
	}
	final := strings.Join(e.deletesAndReplays(), ",")
	if wantFinal := map[bool]string{true: "1,3", false: "1,2,3"}[caps.IsDeleted]; final != wantFinal {
		t.Errorf("SELECT ... FINAL shows keys %s, want %s", final, wantFinal)
	}
}

// TestSetupKeepsAnOlderTarget: a target an older server, the seed flow or
// an earlier changesink made (ReplacingMergeTree(_cdc_lsn), no is_deleted
// argument) is checked and kept by setup on any server, never re-created,
// and applies as before.
//
//changesink:per-server
func TestSetupKeepsAnOlderTarget(t *testing.T) {
	e := newEnv(t, ordersMapping)
	// What setup made for 18.16 (target/testdata/sql_orders_18.16.golden).
	old := "CREATE TABLE IF NOT EXISTS " + mapping.Qualified(e.db, e.m.Target.Table) + " (\n  id Int64,\n  customer_id Int64,\n  amount_cents Int64,\n" +
		"  status String,\n  _cdc_lsn UInt64,\n  _cdc_deleted UInt8\n) ENGINE = ReplacingMergeTree(_cdc_lsn)\nORDER BY id"
	if err := e.conn.Exec(context.Background(), old); err != nil {
		t.Fatal(err)
	}
	made := e.query("SELECT metadata_modification_time FROM system.tables WHERE database = ? AND name = ?", e.db, e.m.Target.Table)
	e.setup()
	if got := e.engineFull(); !strings.HasPrefix(got, "ReplacingMergeTree(_cdc_lsn) ORDER BY id") {
		t.Fatalf("setup changed the older target to %s", got)
	}
	if got := e.query("SELECT metadata_modification_time FROM system.tables WHERE database = ? AND name = ?", e.db, e.m.Target.Table); got[0] != made[0] {
		t.Errorf("setup re-created the target (made %s, now %s)", made[0], got[0])
	}
	if final := strings.Join(e.deletesAndReplays(), ","); final != "1,2,3" {
		t.Errorf("SELECT ... FINAL shows keys %s, want 1,2,3 (the delete marker of 2 shows without is_deleted)", final)
	}
}
