package cdc

import (
	"hash/maphash"
	"slices"
)

// batch holds the latest event per key of one batch: memory grows with the
// number of keys (one row each) plus 32 bytes per superseded (key, LSN)
// version, never with the payload of superseded events.
type batch struct {
	m      *Mapping
	seed   maphash.Seed
	index  map[string]int32 // key bytes → index into rows
	rows   []row            // the latest event of each key, in first-seen order
	older  map[olderKey]olderVersion
	events int64
}

// olderKey identifies a superseded version: the key's index and its LSN.
type olderKey struct {
	key int32
	lsn uint64
}

// olderVersion is what is kept of a superseded version: a 64-bit hash of
// its payload and its record number, enough to refuse an equal-LSN event
// that differs (a hash collision could only hide such a conflict with
// probability 2^-64; an equal version is never refused).
type olderVersion struct {
	hash uint64
	rec  int64
}

func newBatch(m *Mapping) *batch {
	return &batch{m: m, seed: maphash.MakeSeed(), index: map[string]int32{}, older: map[olderKey]olderVersion{}}
}

// add merges one event: it becomes its key's row when its LSN is higher;
// an event at an LSN already seen for the key must carry the same payload
// (seed: "Conflicting changes share an id and LSN"), else add refuses it.
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
		b.older[olderKey{i, cur.lsn}] = olderVersion{hash: hashRow(b.seed, cur), rec: cur.rec}
		*cur = r
	default:
		h := hashRow(b.seed, &r)
		k := olderKey{i, r.lsn}
		if v, ok := b.older[k]; ok {
			if v.hash != h {
				return b.conflict(&r, v.rec)
			}
			return nil
		}
		b.older[k] = olderVersion{hash: h, rec: r.rec}
	}
	return nil
}

func (b *batch) conflict(r *row, other int64) error {
	return &RecordError{Record: r.rec, Offset: -1, Key: renderKey(b.m, r.vals), LSN: r.lsn, Other: other, Err: ErrConflict}
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
