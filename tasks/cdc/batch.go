package cdc

import (
	"hash/maphash"
	"slices"
)

// batch holds the latest event per key of one batch: memory grows with the
// number of keys (one row each), never with the events of a key.
type batch struct {
	m      *Mapping
	seed   maphash.Seed
	index  map[string]int32 // key bytes → index into rows
	rows   []row            // the latest event of each key, in first-seen order
	events int64
	// outOfOrder marks keys that got an event with an LSN below their
	// latest one: their versions are checked by a second pass (history).
	outOfOrder map[int32]bool
}

func newBatch(m *Mapping) *batch {
	b := &batch{m: m, seed: maphash.MakeSeed()}
	b.reset()
	return b
}

func (b *batch) reset() {
	b.index, b.rows, b.events, b.outOfOrder = map[string]int32{}, nil, 0, map[int32]bool{}
}

// add merges one event: it becomes its key's row when its LSN is higher;
// an event at the key's latest LSN must carry the same payload (seed:
// "Conflicting changes share an id and LSN"), else add refuses it. An
// event below the latest LSN is left to the history pass.
func (b *batch) add(r row) error {
	b.events++
	i, ok := b.index[r.key]
	if !ok {
		b.index[r.key] = int32(len(b.rows))
		b.rows = append(b.rows, r)
		return nil
	}
	cur := &b.rows[i]
	switch {
	case r.lsn == cur.lsn:
		if !samePayload(&r, cur) {
			return b.conflict(&r, cur.rec)
		}
	case r.lsn > cur.lsn:
		*cur = r
	default:
		b.outOfOrder[i] = true
	}
	return nil
}

func (b *batch) conflict(r *row, other int64) error {
	return &RecordError{Record: r.rec, Offset: -1, Key: renderKey(b.m, r.vals), LSN: r.lsn, Other: other, Err: ErrConflict}
}

// history is the second pass for keys whose events came out of LSN order:
// it keeps a 64-bit hash of every version of those keys only, and refuses
// two different events at one key and LSN. A hash collision could hide such
// a conflict with probability 2^-64; equal versions are never refused.
type history struct {
	b    *batch
	seen map[olderKey]olderVersion
}

type olderKey struct {
	key int32
	lsn uint64
}

type olderVersion struct {
	hash uint64
	rec  int64
}

func newHistory(b *batch) *history { return &history{b: b, seen: map[olderKey]olderVersion{}} }

func (h *history) reset() { h.seen = map[olderKey]olderVersion{} }

func (h *history) check(r row) error {
	i, ok := h.b.index[r.key]
	if !ok || !h.b.outOfOrder[i] {
		return nil
	}
	k := olderKey{i, r.lsn}
	sum := hashRow(h.b.seed, &r)
	if v, ok := h.seen[k]; ok {
		if v.hash != sum {
			return h.b.conflict(&r, v.rec)
		}
		return nil
	}
	h.seen[k] = olderVersion{hash: sum, rec: r.rec}
	return nil
}

// sorted returns the latest rows ordered by key, as the seed writes
// expected.jsonl (for key in sorted(latest)).
func (b *batch) sorted() []*row {
	out := make([]*row, len(b.rows))
	for i := range b.rows {
		out[i] = &b.rows[i]
	}
	slices.SortFunc(out, func(x, y *row) int { return compareKeys(b.m, x, y) })
	return out
}
