package cdc

// Tests of batches whose versions went backwards (ErrWentBackwards): a
// batch never applied that is older than the target (an old batch, a
// source restored or migrated) and a change after a snapshot that the
// target cannot place are refused, not skipped, and change nothing; the
// batches that only look so are applied as before.

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
)

// TestApplyOlderBatchAfterNewer: a batch that holds keys older than the
// target and none newer was never applied (not in the ledger): it is
// refused, not skipped as older, and changes nothing; a batch mixing older
// and newer keys applies the newer ones.
func TestApplyOlderBatchAfterNewer(t *testing.T) {
	e := newEnv(t, ordersMapping)
	e.setup()
	if _, _, err := e.apply(false, orderEvent(1, int64(10), int64(900), "shipped", int64(200), false),
		orderEvent(2, nil, nil, nil, int64(201), true)); err != nil {
		t.Fatal(err)
	}
	before := e.query("SELECT id, amount_cents, status, _cdc_lsn, _cdc_deleted FROM " + e.db + ".orders_cdc ORDER BY id, _cdc_lsn")
	_, cfg, err := e.apply(true, orderEvent(1, int64(10), int64(500), "new", int64(100), false),
		orderEvent(2, int64(20), int64(1), "new", int64(150), false),
		orderEvent(3, int64(30), int64(3), "new", int64(160), false))
	testenv.WantError(t, err, outcome.Refused, ErrWentBackwards)
	testenv.CheckError(t, err, outcome.Refused, ErrWentBackwards, "record 1 (key id=1, LSN 100)", "holds version 200 for this key", "(2 older, 1 new to it)",
		"rebuild the target", "do not apply it")
	noOutputs(t, cfg)
	if after := e.query("SELECT id, amount_cents, status, _cdc_lsn, _cdc_deleted FROM " + e.db + ".orders_cdc ORDER BY id, _cdc_lsn"); strings.Join(after, "\n") != strings.Join(before, "\n") {
		t.Errorf("the refused batch changed the target:\n%s\nwas\n%s", after, before)
	}
	res, _, err := e.apply(true, orderEvent(1, int64(10), int64(500), "new", int64(100), false),
		orderEvent(2, int64(20), int64(1), "new", int64(250), false),
		orderEvent(3, int64(30), int64(3), "new", int64(160), false))
	if err != nil {
		t.Fatal(err)
	}
	if res.Pending != 2 || res.Skipped != 1 || res.Verified != 3 {
		t.Errorf("outputs %v", res.Outputs())
	}
	rows := e.query("SELECT id, amount_cents, status, _cdc_lsn, _cdc_deleted FROM " + e.db + ".orders_cdc FINAL ORDER BY id")
	if got, want := strings.Join(rows, "\n"), "1\t900\tshipped\t200\t0\n2\t1\tnew\t250\t0\n3\t3\tnew\t160\t0"; got != want {
		t.Errorf("table\n got %s\nwant %s", got, want)
	}
}

// TestSourceLSNReset: after a restore or a migration every change is
// "older" than the target: the batch is refused, not skipped, and nothing
// changes; the refusal says what to do.
func TestSourceLSNReset(t *testing.T) {
	e := newEnv(t, ordersMapping)
	e.setup()
	if _, _, err := e.apply(false, orderEvent(1, int64(10), int64(100), "old", int64(80000000), false)); err != nil {
		t.Fatal(err)
	}
	before := e.physical()
	_, cfg, err := e.apply(true, orderEvent(1, int64(10), int64(100), "after", int64(2100), false))
	testenv.WantError(t, err, outcome.Refused, ErrWentBackwards)
	testenv.CheckError(t, err, outcome.Refused, ErrWentBackwards,
		"record 1 (key id=1, LSN 2100): versions went backwards: was the source restored or migrated? The target "+e.db+".orders_cdc holds version 80000000",
		"was never applied", `from connector postgresql "kestra_" (Debezium 3.2.1.Final) on database shop`,
		e.db+".orders_cdc_ledger row 1 (batch applied", "rebuild the target", "a new slotName and stateName")
	noOutputs(t, cfg)
	if after := e.physical(); after != before {
		t.Errorf("the refused batch changed the target:\n%s\nwas\n%s", after, before)
	}
	// The applied batch again is a replay: skipped and verified, as before.
	res, _, err := e.apply(true, orderEvent(1, int64(10), int64(100), "old", int64(80000000), false))
	if err != nil || res.Skipped != 1 || res.Verified != 1 {
		t.Fatalf("replay: %v, %v", res, err)
	}
}

// TestSourceLSNResetOverSeedRows: the same on a target the seed flow
// filled before changesink (no ledger rows of its own): the ledger gets a
// baseline, and the per-key rule holds.
func TestSourceLSNResetOverSeedRows(t *testing.T) {
	e := newEnv(t, ordersMapping)
	e.setup()
	if err := e.conn.Exec(context.Background(), "INSERT INTO "+e.db+".orders_cdc (id, customer_id, amount_cents, status, _cdc_lsn, _cdc_deleted) SELECT 1, 10, 100, 'old', 80000000, 0"); err != nil {
		t.Fatal(err)
	}
	_, _, err := e.apply(false, orderEvent(1, int64(10), int64(100), "after", int64(2100), false))
	if !errors.Is(err, ErrWentBackwards) || !strings.Contains(err.Error(), "the rows the target held when its ledger was made") {
		t.Fatalf("err = %v, want ErrWentBackwards naming the baseline", err)
	}
	if got := e.query("SELECT kind, high_version FROM " + e.db + ".orders_cdc_ledger"); strings.Join(got, "\n") != "baseline\t80000000" {
		t.Errorf("ledger %v", got)
	}
}

// snapshotWithoutLedger returns the overlap scenario's target after a
// snapshot batch (keys 1 and 2 at LSN 1000) whose ledger was then dropped
// by hand: the baseline of the overlap tests without the snapshot's LSN.
func snapshotWithoutLedger(t *testing.T) *env {
	t.Helper()
	e := scenarioEnv(t, "overlap_stream")
	if _, _, err := e.apply(true, overlapEvent("READ", 1, "snap", 1000, "first", ""), overlapEvent("READ", 2, "snap2", 1000, "last", "")); err != nil {
		t.Fatal(err)
	}
	if err := e.conn.Exec(context.Background(), "DROP TABLE "+qualified(e.db, ledgerName(e.m))); err != nil {
		t.Fatal(err)
	}
	return e
}

// TestOverlapAfterTheLedgerWasDropped: the ledger keeps the snapshot's
// LSN, the floor of the first transaction after it (TestOverlapAcrossBatches).
// With the ledger dropped by hand after the snapshot batch, the next run
// made a baseline without it: the overlapping UPDATE of key 1 (LSN 950,
// below the snapshot's 1000) was skipped as older while key 2 of the same
// transaction was applied, exit 0 and verified: key 1's change was lost.
// Such a row (no lsn_commit, no snapshot in the batch or the ledger, older
// than the target) is refused, naming the key and what to do.
func TestOverlapAfterTheLedgerWasDropped(t *testing.T) {
	e := snapshotWithoutLedger(t)
	before := e.physical()
	_, cfg, err := e.apply(false, overlapEvent("UPDATE", 1, "after", 950, "false", ""), overlapEvent("UPDATE", 2, "after2", 1010, "false", ""))
	if err == nil {
		t.Fatalf("applied; live rows %s", e.liveJSON())
	}
	testenv.WantError(t, err, outcome.Refused, ErrWentBackwards)
	testenv.CheckError(t, err, outcome.Refused, ErrWentBackwards, "record 1 (key id=1, LSN 950)", "no lsn_commit", "snapshot", "holds version 1000")
	noOutputs(t, cfg)
	if after := e.physical(); after != before {
		t.Errorf("the refused batch changed the target:\n%s\nwas\n%s", after, before)
	}
}

// TestOlderWithoutSequenceOnABaseline: the refusal above needs the
// trigger's word that the change is the first transaction after a snapshot
// (a sequence without lsn_commit). A batch without sequences (hand-made,
// like the seed flow's tests) is versioned by its LSNs, as the seed does:
// on the same baseline, the older key is skipped and the newer applied.
func TestOlderWithoutSequenceOnABaseline(t *testing.T) {
	e := snapshotWithoutLedger(t)
	res, _, err := e.apply(false,
		withSource(overlapEvent("UPDATE", 1, "after", 950, "false", ""), "sequence", nil),
		withSource(overlapEvent("UPDATE", 2, "after2", 1010, "false", ""), "sequence", nil))
	if err != nil {
		t.Fatal(err)
	}
	if res.Pending != 1 || res.Skipped != 1 {
		t.Errorf("outputs %v, want key 1 skipped and key 2 applied", res.Outputs())
	}
	if got, want := e.liveJSON(), `{"id":1,"v":"snap"}`+"\n"+`{"id":2,"v":"after2"}`+"\n"; got != want {
		t.Errorf("live rows %s, want %s", got, want)
	}
}
