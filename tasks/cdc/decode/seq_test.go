package decode

import (
	"fmt"
	"math"
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
