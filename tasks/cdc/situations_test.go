package cdc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
	"github.com/changesink/changesink/tasks/cdc/internal/iongen"
)

// Situations real Debezium batches put a target in (a snapshot overlapping
// the stream, a source restored, a key swapped, a TRUNCATE): each ends with
// the right rows, or with a refusal that changed nothing.

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

// TestContradictions: an event whose operation and delete marker disagree
// is refused before anything is written.
func TestContradictions(t *testing.T) {
	src := func(op string, lsn int64) iongen.Struct {
		return iongen.Metadata(op, iongen.Source("shop", "public", "orders", lsn, 700, "false"))
	}
	row := orderRow(1, int64(10), int64(500), "paid")
	noMarker := append(append(iongen.Struct{}, row...), iongen.Field{Name: "metadata", Value: src("DELETE", 102)})
	for _, tc := range []struct {
		name  string
		event any
		want  string
	}{
		{"delete with deleted false", iongen.Event(row, false, src("DELETE", 102)), `metadata.operation is DELETE but "deleted" is not true`},
		{"delete without deleted", noMarker, `metadata.operation is DELETE but "deleted" is not true`},
		{"create with deleted true", iongen.Event(row, true, src("CREATE", 102)), `metadata.operation is CREATE but "deleted" is true`},
		{"update with deleted true", iongen.Event(row, true, src("UPDATE", 102)), `metadata.operation is UPDATE but "deleted" is true`},
		{"read with deleted true", iongen.Event(row, true, src("READ", 102)), `metadata.operation is READ but "deleted" is true`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, ordersMapping)
			e.setup()
			if _, _, err := e.apply(false, orderEvent(1, int64(10), int64(500), "new", int64(100), false)); err != nil {
				t.Fatal(err)
			}
			before := e.physical()
			_, cfg, err := e.apply(true, orderEvent(2, int64(20), int64(1), "fine", int64(101), false), tc.event)
			testenv.WantError(t, err, outcome.Refused, ErrContradiction)
			if !strings.HasPrefix(err.Error(), `record 2 (key id=1, LSN 102), column "metadata.operation": event contradicts itself: `) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("message %v", err)
			}
			noOutputs(t, cfg)
			if after := e.physical(); after != before {
				t.Errorf("the refused batch changed the target:\n%s", after)
			}
		})
	}
}

// TestSequenceContradiction: a sequence naming another LSN than the
// event's is refused (Debezium writes [lsn_commit, lsn]).
func TestSequenceContradiction(t *testing.T) {
	m := loadMapping(t, ordersMapping)
	ev := withSource(orderEvent(1, int64(1), int64(1), "x", int64(950), false), "sequence", `["900","951"]`)
	_, err := decodeBytes(t, m, encode(t, true, ev), 1)
	if !errors.Is(err, ErrContradiction) || !strings.Contains(err.Error(), `metadata.source.sequence ["900","951"] names LSN 951, but metadata.source.lsn is 950`) {
		t.Fatalf("err = %v", err)
	}
}

// TestInsertIsOnePart: a batch's rows go in one INSERT block, which
// ClickHouse writes as one part of a table without PARTITION BY: a run cut
// during the insert leaves none of them or all. The batch is larger than
// the 100,000-row blocks used before.
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
