package decode

import (
	"fmt"
	"math"
	"strconv"

	"github.com/changesink/changesink/tasks/cdc/change"
)

// sequenceOf parses metadata.source.sequence, a JSON array of two
// strings or nulls as Debezium writes it (["50024136744","50024136840"],
// [null,"51884231336"]). ok is false for anything else (a hand-made batch):
// the sequence is then not used.
func sequenceOf(s string) (commit uint64, commitSet bool, lsn uint64, lsnSet bool, ok bool) {
	p := 0
	space := func() {
		for p < len(s) && (s[p] == ' ' || s[p] == '\t') {
			p++
		}
	}
	elem := func() (uint64, bool, bool) {
		space()
		if len(s)-p >= 4 && s[p:p+4] == "null" {
			p += 4
			return 0, false, true
		}
		if p >= len(s) || s[p] != '"' {
			return 0, false, false
		}
		end := p + 1
		for end < len(s) && s[end] >= '0' && s[end] <= '9' {
			end++
		}
		if end >= len(s) || s[end] != '"' || end == p+1 {
			return 0, false, false
		}
		n, err := strconv.ParseUint(s[p+1:end], 10, 64)
		if err != nil {
			return 0, false, false
		}
		p = end + 1
		return n, true, true
	}
	space()
	if p >= len(s) || s[p] != '[' {
		return
	}
	p++
	c, cs, ok1 := elem()
	space()
	if !ok1 || p >= len(s) || s[p] != ',' {
		return
	}
	p++
	l, ls, ok2 := elem()
	space()
	if !ok2 || p >= len(s) || s[p] != ']' {
		return
	}
	p++
	space()
	if p != len(s) {
		return
	}
	return c, cs, l, ls, true
}

// checkSequence refuses a sequence whose own LSN is not the event's
// source.lsn (Debezium writes [lsn_commit, lsn]).
func checkSequence(seq []byte, lsn, commit uint64, commitSet bool, seqLSN uint64, seqLSNSet bool) error {
	if seqLSNSet && seqLSN != lsn {
		return fmt.Errorf("%w: metadata.source.sequence %s names LSN %d, but metadata.source.lsn is %d (Debezium writes [lsn_commit, lsn])",
			change.ErrContradiction, seq, seqLSN, lsn)
	}
	if commitSet && commit == math.MaxUint64 {
		return fmt.Errorf("%w: metadata.source.sequence %s: lsn_commit is outside 0..2^64-2", change.ErrContradiction, seq)
	}
	return nil
}
