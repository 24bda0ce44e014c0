package cdc

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"

	"github.com/changesink/changesink/internal/iongen"
	"github.com/changesink/changesink/internal/outcome"
)

// kcEvent is an event of the pkswap scenario's table public.swap (id, v)
// in transaction tx, shaped as the trigger writes it (testdata/debezium/
// pkswap): a delete with v "" is one under REPLICA IDENTITY DEFAULT, which
// the trigger writes as {id, deleted, metadata}; commit is the lsn_commit
// of metadata.source.sequence ("": null, the first transaction after a
// snapshot, as in the real batch).
func kcEvent(op string, id int64, v string, lsn, tx int64, commit string) iongen.Struct {
	ev := swapEvent(op, id, v, lsn, tx)
	if op == "DELETE" && v == "" {
		ev = slices.DeleteFunc(ev, func(f iongen.Field) bool { return f.Name == "v" })
	}
	if commit != "" {
		ev = withSource(ev, "sequence", fmt.Sprintf(`["%s","%d"]`, commit, lsn))
	}
	return ev
}

// TestKeyChangeRefusals reaches each refusal of batch.go for a primary-key
// change or a commit order the apply cannot follow, through Apply on a
// real target: the refusal names the record, key and LSN, says why, is
// refused (exit 1), and leaves the target, its ledger and the output
// directory as they were. Every target starts from a snapshot (READ at
// LSN 100, seedSwap); earlier batches are applied before the refused one.
//
// Most shapes are ones Debezium writes for a DEFERRABLE primary key (two
// live rows of a key inside one transaction, SET CONSTRAINTS ALL DEFERRED);
// a case says when its batch is one the trigger cannot write (records
// reordered or edited). A transaction that ends with two live rows of a
// key is no refusal: TestKeyRecreated.
func TestKeyChangeRefusals(t *testing.T) {
	ev := kcEvent
	// Key 7 gets a second live row in tx 9: an update, then a deferred
	// insert of the same key (SET CONSTRAINTS ALL DEFERRED).
	twoRows := func(then ...any) []any {
		return append([]any{ev("UPDATE", 7, "seven*", 1000, 9, ""), ev("CREATE", 7, "dup", 1100, 9, "")}, then...)
	}
	for _, tc := range []struct {
		name    string
		target  map[int64]string // the snapshot's rows
		earlier [][]any          // batches applied before the refused one
		batch   []any
		err     error // the sentinel
		record  int64 // RecordError's record, key, LSN, version and column
		key     string
		lsn     uint64
		version uint64
		column  string
		why     string // the message after the sentinel
	}{
		{
			// Reordered records (not the trigger's): pgoutput sends a
			// transaction's changes in WAL order. Both updates of tx 42 were
			// written before its commit floor 5000 (version 5001, a floor
			// tie: the later in the file wins), but the second has the lower LSN.
			name:   "floor tie with a lower LSN",
			target: map[int64]string{7: "seven"},
			batch:  []any{ev("UPDATE", 7, "later", 1100, 42, "5000"), ev("UPDATE", 7, "earlier", 1000, 42, "5000")},
			err:    change.ErrContradiction, record: 2, key: "id=7", lsn: 1000, version: 5001, column: "metadata.source.lsn",
			why: "this change of transaction 42 ties with record 1 at the commit floor, but its LSN is below that record's LSN 1100: the records were reordered",
		},
		{
			// Reordered or edited records (not the trigger's): tx 2's
			// lsn_commit is below tx 1's.
			name:   "lsn_commit goes down",
			target: map[int64]string{7: "seven", 8: "eight"},
			batch:  []any{ev("UPDATE", 7, "first", 1000, 1, "999999"), ev("UPDATE", 8, "second", 2000, 2, "1500")},
			err:    change.ErrContradiction, record: 2, key: "id=8", lsn: 2000, column: "metadata.source.sequence",
			why: "lsn_commit 1500 in metadata.source.sequence is below record 1's, 999999 (transactions arrive in commit order)",
		},
		{
			// Reordered records (not the trigger's): key 7 has two live rows
			// in tx 9, and a change of it at a lower LSN follows.
			name:   "two live rows, then an event below them",
			target: map[int64]string{7: "seven"},
			batch:  twoRows(ev("DELETE", 7, "seven*", 1050, 9, "")),
			err:    change.ErrKeyChange, record: 3, key: "id=7", lsn: 1050,
			why: "key id=7: its events are not in commit order",
		},
		{
			// Hand-made (the trigger writes a txId on every change): a
			// CREATE of key 7, live in the batch, without a transaction.
			name:   "a CREATE of a live key without txId",
			target: map[int64]string{7: "seven"},
			batch:  []any{ev("UPDATE", 7, "seven*", 1000, 8, ""), withSource(ev("CREATE", 7, "again", 1100, 9, "1050"), "txId", nil)},
			err:    change.ErrKeyChange, record: 2, key: "id=7", lsn: 1100,
			why: "key id=7: a CREATE of a live key without a transaction id (metadata.source.txId)",
		},
		{
			// The target holds key 7; tx 9 creates it (deferred) and
			// updates it: which row the update changed is not known.
			name:   "a CREATE of a key the target holds, then an update in its transaction",
			target: map[int64]string{7: "seven"},
			batch:  []any{ev("CREATE", 7, "again", 1000, 9, ""), ev("UPDATE", 7, "x", 1100, 9, "")},
			err:    change.ErrKeyChange, record: 1, key: "id=7", version: 1000,
			why: "key id=7: transaction 9 creates it while the target holds it live (version 100), then changes it again: " +
				"which row that change was of is not in the batch",
		},
		{
			// Then UPDATE … WHERE id = 7 in tx 9 (it changes both rows):
			// which row an update event changed is not known.
			name:   "an update while the key has two live rows",
			target: map[int64]string{7: "seven"},
			batch:  twoRows(ev("UPDATE", 7, "x", 1200, 9, "")),
			err:    change.ErrKeyChange, record: 3, key: "id=7", lsn: 1200,
			why: "key id=7: an UPDATE while the key has two live rows inside transaction 9: which row it changed is not in the batch",
		},
		{
			// REPLICA IDENTITY DEFAULT: tx 9 updates key 7, then swaps 6
			// and 7 (DELETE 6 / CREATE 7 / DELETE 7 / CREATE 6, as in the
			// real pkswap batch); key 7's delete carries only the key.
			name:   "a key-only delete while the key has two different rows",
			target: map[int64]string{6: "six", 7: "seven"},
			batch: []any{ev("UPDATE", 7, "seven*", 1000, 9, ""),
				ev("DELETE", 6, "", 1100, 9, ""), ev("CREATE", 7, "six", 1100, 9, ""),
				ev("DELETE", 7, "", 1200, 9, ""), ev("CREATE", 6, "seven*", 1200, 9, "")},
			err: change.ErrKeyChange, record: 4, key: "id=7", lsn: 1200,
			why: "key id=7: a delete with only the key (REPLICA IDENTITY DEFAULT) while the key has two different live rows",
		},
		{
			// Edited (not the trigger's): under REPLICA IDENTITY FULL a
			// delete's before image is one of the key's rows; this one
			// holds a value neither row had.
			name:   "a delete whose before image is neither live row",
			target: map[int64]string{7: "seven"},
			batch:  twoRows(ev("DELETE", 7, "neither", 1200, 9, "")),
			err:    change.ErrKeyChange, record: 3, key: "id=7", lsn: 1200,
			why: "key id=7: a delete whose before image is none of the key's live rows",
		},
		{
			// UPDATE … SET id = id + 1 (FULL) cut by the trigger after key 3
			// got the row "b" while its old row "c" is live (TestPKShiftAcrossBatches);
			// the next batch continues tx 9 with a delete of the new row
			// (DELETE … WHERE v = 'b'): key 3 is left with "c", whose values
			// the ledger holds only as a hash.
			name:   "a delete of the row the previous batch gave the key",
			target: map[int64]string{1: "a", 2: "b", 3: "c"},
			earlier: [][]any{{ev("DELETE", 1, "a", 1000, 9, ""), ev("CREATE", 2, "a", 1000, 9, ""),
				ev("DELETE", 2, "b", 1100, 9, ""), ev("CREATE", 3, "b", 1100, 9, "")}},
			batch: []any{ev("DELETE", 3, "b", 1200, 9, "")},
			err:   change.ErrKeyChange, record: 1, key: "id=3", lsn: 1200,
			why: "key id=3: a delete of the row this key got in the previous batch, leaving a row whose values that batch did not hold",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := scenarioEnv(t, "pkswap")
			e.seedSwap(tc.target)
			for n, evs := range tc.earlier {
				if _, _, err := e.apply(false, evs...); err != nil {
					t.Fatalf("earlier batch %d: %v", n+1, err)
				}
			}
			ledger := "SELECT count() FROM " + mapping.Qualified(e.db, mapping.LedgerName(e.m))
			live, phys, entries := e.liveJSON(), e.physical(), e.query(ledger)
			_, cfg, err := e.apply(true, tc.batch...)
			want := &change.RecordError{Record: tc.record, Offset: -1, Key: tc.key, LSN: tc.lsn, Version: tc.version, Column: tc.column,
				Err: fmt.Errorf("%w: %s", tc.err, tc.why)}
			refusedAt(t, err, tc.err, want)
			noOutputs(t, cfg)
			if got := e.liveJSON(); got != live {
				t.Errorf("the refused batch changed the live view:\n%s\nwas\n%s", got, live)
			}
			if e.physical() != phys || slices.Compare(e.query(ledger), entries) != 0 {
				t.Error("the refused batch changed the target or its ledger")
			}
		})
	}
}

// refusedAt checks err is a refusal (exit 1) wrapping sentinel, whose
// RecordError is want, message included.
func refusedAt(t *testing.T, err, sentinel error, want *change.RecordError) {
	t.Helper()
	wantError(t, err, outcome.Refused, sentinel)
	var re *change.RecordError
	if !errors.As(err, &re) {
		t.Fatalf("err = %v, not a *RecordError", err)
	}
	if re.Record != want.Record || re.Key != want.Key || re.LSN != want.LSN || re.Version != want.Version || re.Column != want.Column || re.Other != 0 {
		t.Errorf("located at record %d key %q LSN %d version %d column %q other %d, want record %d key %q LSN %d version %d column %q",
			re.Record, re.Key, re.LSN, re.Version, re.Column, re.Other, want.Record, want.Key, want.LSN, want.Version, want.Column)
	}
	if got, w := err.Error(), want.Error(); got != w {
		t.Errorf("message\n%s\nwant\n%s", got, w)
	}
}

// swapEvent is an event of the pkswap scenario's table public.swap (id, v)
// in transaction tx; a delete carries its before image v ("": only the key,
// REPLICA IDENTITY DEFAULT).
func swapEvent(op string, id int64, v string, lsn int64, tx int64) iongen.Struct {
	row := iongen.Struct{{"id", id}, {"v", v}}
	if op == "DELETE" && v == "" {
		row = iongen.Struct{{"id", id}, {"v", ""}}
	}
	return iongen.Event(row, op == "DELETE", iongen.Metadata(op, iongen.Source("cs_dbz_pkswap", "public", "swap", lsn, tx, "false")))
}

// seedSwap fills the pkswap target with the given rows at LSN 100 (a snapshot).
func (e *env) seedSwap(rows map[int64]string) {
	e.t.Helper()
	var evs []any
	for id := int64(1); id <= 9; id++ {
		if v, ok := rows[id]; ok {
			evs = append(evs, iongen.Event(iongen.Struct{{"id", id}, {"v", v}}, false,
				iongen.Metadata("READ", iongen.Source("cs_dbz_pkswap", "public", "swap", int64(100), 1, "true"))))
		}
	}
	if _, _, err := e.apply(false, evs...); err != nil {
		e.t.Fatal(err)
	}
}

// TestRealPKSwap: a primary-key swap, with the batches real Debezium wrote:
// a DEFERRABLE primary key under REPLICA IDENTITY FULL, UPDATE … SET id =
// CASE id WHEN 6 THEN 7 WHEN 7 THEN 6 END, arrives as DELETE 6 / CREATE 7
// and DELETE 7 / CREATE 6; by LSN alone key 7 ends deleted. Key 7's delete
// carries the row "seven", not the "six" just created: it removed the old
// row, and 7 keeps "six".
func TestRealPKSwap(t *testing.T) { endsAsTheSourceThenReplays(t, "pkswap", 2) }

// TestPKSwapDefaultIdentityRefused: the same swap under REPLICA IDENTITY
// DEFAULT (deletes carry only the key) does not say which row key 7's
// delete removed: refused, naming the key, nothing written.
func TestPKSwapDefaultIdentityRefused(t *testing.T) {
	e := scenarioEnv(t, "pkswap")
	e.seedSwap(map[int64]string{5: "five", 6: "six", 7: "seven", 8: "eight"})
	before := e.physical()
	_, cfg, err := e.apply(true,
		swapEvent("DELETE", 6, "", 1000, 9), swapEvent("CREATE", 7, "six", 1000, 9),
		swapEvent("DELETE", 7, "", 1100, 9), swapEvent("CREATE", 6, "seven", 1100, 9))
	wantError(t, err, outcome.Refused, change.ErrKeyChange)
	checkError(t, err, outcome.Refused, change.ErrKeyChange, "record 2 (key id=7, version 1000)", "transaction 9 creates it while the target holds it live (version 100)", "REPLICA IDENTITY FULL")
	noOutputs(t, cfg)
	if e.physical() != before {
		t.Error("the refused batch changed the target")
	}
}

// TestPKRotation: keys 1 → 2 → 3 → 1 in one transaction (FULL): every
// created key's old row is removed by the next pair's delete.
func TestPKRotation(t *testing.T) {
	e := scenarioEnv(t, "pkswap")
	e.seedSwap(map[int64]string{1: "a", 2: "b", 3: "c"})
	if _, _, err := e.apply(false,
		swapEvent("DELETE", 1, "a", 1000, 9), swapEvent("CREATE", 2, "a", 1000, 9),
		swapEvent("DELETE", 2, "b", 1100, 9), swapEvent("CREATE", 3, "b", 1100, 9),
		swapEvent("DELETE", 3, "c", 1200, 9), swapEvent("CREATE", 1, "c", 1200, 9)); err != nil {
		t.Fatal(err)
	}
	if got := e.liveJSON(); got != `{"id":1,"v":"c"}`+"\n"+`{"id":2,"v":"a"}`+"\n"+`{"id":3,"v":"b"}`+"\n" {
		t.Errorf("live rows\n%s", got)
	}
}

// TestPKShiftAcrossBatches: UPDATE … SET id = id + 1 on a DEFERRABLE key
// (FULL), cut by the trigger's maxRecords inside the transaction: the
// first batch ends with key 3 created while its old row is live; the
// ledger carries that, and the next batch's delete of the old row 3 keeps
// the new one (alone, that delete would remove key 3).
func TestPKShiftAcrossBatches(t *testing.T) {
	e := scenarioEnv(t, "pkswap")
	e.seedSwap(map[int64]string{1: "a", 2: "b", 3: "c"})
	second := []any{swapEvent("DELETE", 3, "c", 1200, 9), swapEvent("CREATE", 4, "c", 1200, 9)}
	if _, _, err := e.apply(false,
		swapEvent("DELETE", 1, "a", 1000, 9), swapEvent("CREATE", 2, "a", 1000, 9),
		swapEvent("DELETE", 2, "b", 1100, 9), swapEvent("CREATE", 3, "b", 1100, 9)); err != nil {
		t.Fatal(err)
	}
	if got := e.query("SELECT open_keys FROM " + e.db + ".pkswap_cdc_ledger ORDER BY seq DESC LIMIT 1"); !strings.Contains(got[0], `"shown":"id=3","tx":9`) {
		t.Errorf("the ledger does not carry key 3: %v", got)
	}
	if _, _, err := e.apply(true, second...); err != nil {
		t.Fatal(err)
	}
	want := `{"id":2,"v":"a"}` + "\n" + `{"id":3,"v":"b"}` + "\n" + `{"id":4,"v":"c"}` + "\n"
	if got := e.liveJSON(); got != want {
		t.Errorf("live rows\n%s\nwant\n%s", got, want)
	}
	// A replay of the second batch starts from what the first left, again.
	res, _, err := e.apply(false, second...)
	if err != nil || res.Pending != 0 || res.Verified != 2 {
		t.Fatalf("replay: %v, %v", res, err)
	}
	if got := e.liveJSON(); got != want {
		t.Errorf("after the replay\n%s", got)
	}
}
