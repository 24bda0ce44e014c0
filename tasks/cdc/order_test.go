package cdc

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"

	"github.com/changesink/changesink/internal/iongen"
	"github.com/changesink/changesink/internal/outcome"
)

// TestVersions stamps rows as a batch does, in file order, and checks the
// version of each (order.go).
func TestVersions(t *testing.T) {
	type ev struct {
		op       string
		lsn      uint64
		commit   uint64 // 0: null
		want     uint64
		floorSet bool
	}
	for _, tc := range []struct {
		name string
		evs  []ev
	}{
		{"snapshot rows at their LSN, the first transaction after it above it", []ev{
			{"READ", 1000, 0, 1000, false}, {"UPDATE", 950, 0, 1001, true}, {"CREATE", 1200, 0, 1200, true}}},
		{"a later transaction by its lsn_commit", []ev{
			{"UPDATE", 900, 1000, 1001, true}, {"UPDATE", 1100, 1000, 1100, true}, {"UPDATE", 1000, 1000, 1001, true}}},
		{"no snapshot, no lsn_commit: the LSN (seed-compatible)", []ev{
			{"UPDATE", 950, 0, 950, false}, {"DELETE", 960, 0, 960, false}}},
		{"an incremental READ carries lsn_commit: a streamed position", []ev{
			{"READ", 500, 1000, 1001, true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var o change.Orderer
			for i, e := range tc.evs {
				r := change.Row{Meta: change.Meta{Op: e.op, LSN: e.lsn, Commit: e.commit, CommitSet: e.commit != 0}}
				o.Stamp(&r)
				if r.Version != e.want || r.Meta.FloorSet != e.floorSet {
					t.Errorf("event %d (%s at %d, lsn_commit %d): version %d floored %v, want %d %v", i+1, e.op, e.lsn, e.commit, r.Version, r.Meta.FloorSet, e.want, e.floorSet)
				}
			}
		})
	}
}

// TestFloorTieInOneBatch: two changes of key 1 in one transaction, both
// written before its floor, share a version; the later in the file wins.
// Two transactions never share one (a conflict, as before).
func TestFloorTieInOneBatch(t *testing.T) {
	m := loadMapping(t, ordersMapping)
	ev := func(status string, lsn int64, tx int64) any {
		e := orderEvent(1, int64(1), int64(1), status, lsn, false)
		return withSource(withSource(e, "txId", tx), "sequence", fmt.Sprintf(`["1000","%d"]`, lsn))
	}
	b, err := decodeBytes(t, m, encode(t, true, ev("a", 900, 9), ev("b", 950, 9)), 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := jsonLines(b); !strings.Contains(got, `"status": "b", "_cdc_lsn": 1001`) {
		t.Errorf("rows %s", got)
	}
	_, err = decodeBytes(t, m, encode(t, true, ev("a", 900, 9), ev("b", 950, 10)), 1)
	if want := "record 2 (key id=1, LSN 950, version 1001, same as record 1): conflicting changes share a key and LSN"; err == nil || err.Error() != want {
		t.Errorf("err = %v, want %s", err, want)
	}
}

// TestDigestIsTheBatchNotItsForm: the ledger's digest of a batch is the
// same for the binary (Kestra 2.x) and the text (1.x) form of every real
// Debezium batch, and differs between batches.
func TestDigestIsTheBatchNotItsForm(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join(realBatches, "*", "changes-*.binary.ion"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no real batches: %v", err)
	}
	seen := map[string]string{}
	checked := 0
	for _, bin := range paths {
		m := loadMapping(t, filepath.Join(filepath.Dir(bin), "mapping.yaml"))
		digest := func(path string) (string, error) {
			b, err := decodeFile(context.Background(), path, m, 2)
			if err != nil {
				return "", err
			}
			return b.Digest(), nil
		}
		d, err := digest(bin)
		if err != nil {
			// Refused batches (a TOAST placeholder, values another helper
			// maps) have no digest: nothing of theirs reaches the ledger.
			t.Logf("%s is refused: %v", bin, err)
			continue
		}
		txt, err := digest(strings.Replace(bin, ".binary.ion", ".text.ion", 1))
		if err != nil || txt != d {
			t.Errorf("%s: binary digest %s, text %s (%v)", bin, d, txt, err)
		}
		if other, dup := seen[d]; dup {
			t.Errorf("%s and %s share a digest", bin, other)
		}
		seen[d] = bin
		checked++
	}
	if checked < 10 {
		t.Errorf("only %d real batches decoded", checked)
	}
}

// TestOverlapInOneBatch: a transaction open while the slot's snapshot is
// taken wrote key 1 at LSN 950, below the snapshot's 1000, and commits
// after it: its UPDATE follows the snapshot's READ in the batch and must
// win.
func TestOverlapInOneBatch(t *testing.T) {
	for _, f := range forms() {
		t.Run(f.name, func(t *testing.T) {
			e := scenarioEnv(t, "overlap_stream")
			res, _, err := e.apply(f.binary,
				overlapEvent("READ", 1, "snap", 1000, "last", ""),
				overlapEvent("UPDATE", 1, "after", 950, "false", ""))
			if err != nil {
				t.Fatal(err)
			}
			if got := e.liveJSON(); got != `{"id":1,"v":"after"}`+"\n" {
				t.Errorf("live rows %s", got)
			}
			if res.Pending != 1 || res.Verified != 1 {
				t.Errorf("outputs %v", res.Outputs())
			}
			// The version is just above the snapshot's LSN (order.go).
			if got := e.query("SELECT _cdc_lsn FROM " + mapping.Qualified(e.db, e.m.Target.Table) + " FINAL"); got[0] != "1001" {
				t.Errorf("version %v, want 1001", got)
			}
		})
	}
}

// TestOverlapAcrossBatches: the same when the snapshot and the stream are
// consecutive batches: the ledger keeps the snapshot's LSN.
func TestOverlapAcrossBatches(t *testing.T) {
	e := scenarioEnv(t, "overlap_stream")
	if _, _, err := e.apply(true, overlapEvent("READ", 1, "snap", 1000, "last", "")); err != nil {
		t.Fatal(err)
	}
	res, _, err := e.apply(false, overlapEvent("UPDATE", 1, "after", 950, "false", ""))
	if err != nil {
		t.Fatal(err)
	}
	if got := e.liveJSON(); got != `{"id":1,"v":"after"}`+"\n" || res.Pending != 1 {
		t.Errorf("live rows %s, outputs %v", got, res.Outputs())
	}
	// A later transaction carries lsn_commit: ordered by it, not by the snapshot.
	if _, _, err := e.apply(false, overlapEvent("UPDATE", 1, "later", 1200, "false", `["1100","1200"]`)); err != nil {
		t.Fatal(err)
	}
	if got := e.liveJSON(); got != `{"id":1,"v":"later"}`+"\n" {
		t.Errorf("live rows %s", got)
	}
}

// TestRealOverlapStream applies the batch real Debezium wrote for the
// reproduced overlap (harness/debezium FINDINGS §3): key 1's snapshot READ
// (LSN 51884232048) and transaction B's UPDATE at 51884231336, below it.
// The target ends as the source did; a replay changes nothing.
func TestRealOverlapStream(t *testing.T) { endsAsTheSourceThenReplays(t, "overlap_stream", 4) }

// TestFloorTieAcrossBatches: two changes of key 1 in one transaction,
// both written before its commit floor (lsn_commit 1000), share version
// 1001; the trigger cut the transaction between two batches. The second
// batch continues the transaction the first ended in: its row replaces
// the first's (ReplacingMergeTree keeps the last insert of a version,
// TestReplacingKeepsLastInsertOfAVersion). Another transaction at that
// version is a conflict, as before.
//
//changesink:per-server
func TestFloorTieAcrossBatches(t *testing.T) {
	ev := func(status string, lsn int64, tx int64) any {
		e := orderEvent(1, int64(1), int64(1), status, lsn, false)
		e = withSource(e, "txId", tx)
		return withSource(e, "sequence", fmt.Sprintf(`["1000","%d"]`, lsn))
	}
	e := newEnv(t, ordersMapping)
	e.setup()
	if _, _, err := e.apply(false, ev("a", 900, 9)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.apply(false, ev("other tx", 950, 10)); !errors.Is(err, change.ErrTargetConflict) {
		t.Fatalf("another transaction at the same version: %v, want ErrTargetConflict", err)
	}
	res, _, err := e.apply(true, ev("b", 950, 9))
	if err != nil {
		t.Fatal(err)
	}
	if got := e.query("SELECT status, _cdc_lsn FROM " + e.db + ".orders_cdc FINAL"); strings.Join(got, "|") != "b\t1001" || res.Pending != 1 {
		t.Errorf("target %v, outputs %v", got, res.Outputs())
	}
}

// TestReplacingKeepsLastInsertOfAVersion checks on the real server what
// the floor ties rely on: among rows of one key and one version,
// ReplacingMergeTree keeps the last inserted, under FINAL and in a merge
// (ReplacingSortedBlockInputStream selects with >=).
//
//changesink:per-server
func TestReplacingKeepsLastInsertOfAVersion(t *testing.T) {
	e := newEnv(t, ordersMapping)
	e.setup()
	name := e.db + ".orders_cdc"
	for _, s := range []string{"first", "second", "older"} {
		lsn := map[string]int{"first": 5, "second": 5, "older": 4}[s]
		if err := e.conn.Exec(context.Background(), fmt.Sprintf("INSERT INTO %s (id, customer_id, amount_cents, status, _cdc_lsn, _cdc_deleted) SELECT 1, 1, 1, '%s', %d, 0", name, s, lsn)); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.query("SELECT status FROM " + name + " FINAL"); got[0] != "second" {
		t.Errorf("FINAL keeps %v", got)
	}
	if err := e.conn.Exec(context.Background(), "OPTIMIZE TABLE "+name+" FINAL"); err != nil {
		t.Fatal(err)
	}
	if got := e.query("SELECT status FROM " + name); len(got) != 1 || got[0] != "second" {
		t.Errorf("the merge keeps %v", got)
	}
}

// TestTransactionWithTwoCommitFloors: Debezium writes one lsn_commit (the
// first element of metadata.source.sequence) for every change of a
// transaction. A batch whose transaction carried two was applied: the
// earlier change, raised to the higher floor, outranked the later one, and
// key 1 ended with the first of its two updates (exit 0, verified). It is
// refused, naming both records.
func TestTransactionWithTwoCommitFloors(t *testing.T) {
	m := loadMapping(t, ordersMapping)
	ev := func(amount, lsn int64, seq string) iongen.Struct {
		e := orderEvent(1, int64(10), amount, "paid", lsn, false)
		return withSource(withSource(e, "txId", int64(42)), "sequence", seq)
	}
	for _, tc := range []struct {
		name        string
		first, then string
	}{
		{"a higher floor first", `["5000","1000"]`, `["900","1100"]`},
		{"a lower floor first", `["900","1000"]`, `["5000","1100"]`},
		{"null then a floor", `[null,"1000"]`, `["900","1100"]`},
		{"a floor then null", `["900","1000"]`, `[null,"1100"]`},
	} {
		for _, f := range forms() {
			t.Run(tc.name+"/"+f.name, func(t *testing.T) {
				_, err := decodeBytes(t, m, encode(t, f.binary, ev(1, 1000, tc.first), ev(2, 1100, tc.then)), 2)
				if !errors.Is(err, change.ErrContradiction) {
					t.Fatalf("err = %v, want ErrContradiction", err)
				}
				if k := outcome.Classify(markInput(err)); k != outcome.Refused {
					t.Errorf("class %v, want refused", k)
				}
				for _, want := range []string{"record 2 (", "key id=1", "LSN 1100", "transaction 42", "record 1"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("message lacks %q: %v", want, err)
					}
				}
			})
		}
	}
	// One floor for the whole transaction is applied as before.
	b, err := decodeBytes(t, m, encode(t, true, ev(1, 1000, `["900","1000"]`), ev(2, 1100, `["900","1100"]`)), 2)
	if err != nil {
		t.Fatal(err)
	}
	if r := b.Sorted()[0]; r.Vals[2].N != 2 {
		t.Errorf("key 1 holds amount %d, want the later change's 2", r.Vals[2].N)
	}
}

// TestTransactionOutOfLSNOrder: pgoutput sends a transaction's changes in
// WAL order, so their LSNs never decrease. Two updates of key 1 written
// before their transaction's commit floor share its version (a floor tie:
// the later in the file wins); with the two records swapped the earlier
// update won, exit 0 and verified. Such a tie whose LSNs go down is
// refused, naming both records. (Hand-made batches elsewhere put one
// transaction's events out of LSN order on purpose; only the tie, where
// the file order decides, is refused.)
func TestTransactionOutOfLSNOrder(t *testing.T) {
	m := loadMapping(t, ordersMapping)
	ev := func(status string, lsn int64) iongen.Struct {
		e := orderEvent(1, int64(10), int64(5), status, lsn, false)
		return withSource(withSource(e, "txId", int64(42)), "sequence", fmt.Sprintf(`["5000","%d"]`, lsn))
	}
	for _, f := range forms() {
		t.Run(f.name, func(t *testing.T) {
			_, err := decodeBytes(t, m, encode(t, f.binary, ev("second", 1100), ev("first", 1000)), 2)
			if !errors.Is(err, change.ErrContradiction) {
				t.Fatalf("err = %v, want ErrContradiction", err)
			}
			for _, want := range []string{"record 2 (", "key id=1", "LSN 1000", "transaction 42", "record 1", "LSN 1100"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("message lacks %q: %v", want, err)
				}
			}
			// In order, the later change wins the tie.
			b, err := decodeBytes(t, m, encode(t, f.binary, ev("first", 1000), ev("second", 1100), ev("second", 1100)), 2)
			if err != nil {
				t.Fatal(err)
			}
			if r := b.Sorted()[0]; r.Vals[3].S != "second" || r.Version != 5001 {
				t.Errorf("key 1 holds %q at %d, want \"second\" at 5001", r.Vals[3].S, r.Version)
			}
		})
	}
}

// TestCommitFloorGoesDown: transactions arrive in commit order, so the
// lsn_commit of each is at least the previous one's (it is the end of the
// last COMMIT before it). A batch whose lsn_commit went down (records of
// two transactions reordered, or a sequence edited) was applied: key 1's
// earlier update, raised to its higher floor, outranked the later one,
// exit 0 and verified. It is refused, naming both records.
func TestCommitFloorGoesDown(t *testing.T) {
	m := loadMapping(t, ordersMapping)
	ev := func(status string, lsn, tx int64, commit string) iongen.Struct {
		e := orderEvent(1, int64(10), int64(5), status, lsn, false)
		return withSource(withSource(e, "txId", tx), "sequence", fmt.Sprintf(`["%s","%d"]`, commit, lsn))
	}
	for _, f := range forms() {
		t.Run(f.name, func(t *testing.T) {
			_, err := decodeBytes(t, m, encode(t, f.binary, ev("first", 1000, 1, "999999"), ev("second", 2000, 2, "1500")), 2)
			if !errors.Is(err, change.ErrContradiction) {
				t.Fatalf("err = %v, want ErrContradiction", err)
			}
			for _, want := range []string{"record 2 (", "key id=1", "LSN 2000", "lsn_commit 1500", "record 1", "999999"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("message lacks %q: %v", want, err)
				}
			}
			// In commit order the later transaction wins.
			b, err := decodeBytes(t, m, encode(t, f.binary, ev("first", 1000, 1, "900"), ev("second", 2000, 2, "1500")), 2)
			if err != nil {
				t.Fatal(err)
			}
			if r := b.Sorted()[0]; r.Vals[3].S != "second" {
				t.Errorf("key 1 holds %q, want \"second\"", r.Vals[3].S)
			}
		})
	}
}
