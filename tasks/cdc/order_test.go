package cdc

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
)

func TestSequenceOf(t *testing.T) {
	for _, tc := range []struct {
		in                    string
		commit, lsn           uint64
		commitSet, lsnSet, ok bool
	}{
		{`["50024136744","50024136840"]`, 50024136744, 50024136840, true, true, true},
		{`[null,"51884231336"]`, 0, 51884231336, false, true, true},
		{`[ null , "7" ]`, 0, 7, false, true, true},
		{`[null,null]`, 0, 0, false, false, true},
		{`["18446744073709551615","1"]`, math.MaxUint64, 1, true, true, true},
		{`["18446744073709551616","1"]`, 0, 0, false, false, false},
		{`[null,"200."]`, 0, 0, false, false, false}, // a hand-made decimal LSN: not used
		{`[null,""]`, 0, 0, false, false, false},
		{`[null,"1"] x`, 0, 0, false, false, false},
		{`["1"]`, 0, 0, false, false, false},
		{`[1,2]`, 0, 0, false, false, false},
		{``, 0, 0, false, false, false},
	} {
		c, cs, l, ls, ok := sequenceOf(tc.in)
		if ok != tc.ok || (ok && (c != tc.commit || cs != tc.commitSet || l != tc.lsn || ls != tc.lsnSet)) {
			t.Errorf("sequenceOf(%q) = %d %v %d %v %v", tc.in, c, cs, l, ls, ok)
		}
	}
}

func FuzzSequenceOf(f *testing.F) {
	for _, s := range []string{`["50024136744","50024136840"]`, `[null,"1"]`, `[null,null]`, `["18446744073709551615","0"]`, `[`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, cs, l, ls, ok := sequenceOf(s)
		if !ok {
			return
		}
		// What parses renders back to an equivalent sequence.
		elem := func(n uint64, set bool) string {
			if !set {
				return "null"
			}
			return fmt.Sprintf("%q", fmt.Sprint(n))
		}
		back := "[" + elem(c, cs) + "," + elem(l, ls) + "]"
		c2, cs2, l2, ls2, ok2 := sequenceOf(back)
		if !ok2 || c2 != c || cs2 != cs || l2 != l || ls2 != ls {
			t.Fatalf("%q parsed to %s, which parses differently", s, back)
		}
		if strings.Count(s, ",") < 1 {
			t.Fatalf("%q has no comma but parsed", s)
		}
	})
}

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
			var o orderer
			for i, e := range tc.evs {
				r := row{change: change{operation: e.op, lsn: e.lsn, commit: e.commit, commitSet: e.commit != 0}}
				o.stamp(&r)
				if r.lsn != e.want || r.change.floorSet != e.floorSet {
					t.Errorf("event %d (%s at %d, lsn_commit %d): version %d floored %v, want %d %v", i+1, e.op, e.lsn, e.commit, r.lsn, r.change.floorSet, e.want, e.floorSet)
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
			return b.digest(), nil
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
