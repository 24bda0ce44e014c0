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
	rows   rowStore         // the latest event of each key, in first-seen order
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
	b.index, b.rows, b.events, b.outOfOrder = map[string]int32{}, rowStore{cols: len(b.m.cols)}, 0, map[int32]bool{}
}

// len is the number of keys; at returns the row of the i-th key seen.
func (b *batch) len() int        { return b.rows.n }
func (b *batch) at(i int32) *row { return b.rows.at(i) }

// add merges one event: it becomes its key's row when its LSN is higher
// (its unchanged TOAST values taken from the row it replaces:
// keepUnchanged); an event at the key's latest LSN must carry the same
// payload (seed: "Conflicting changes share an id and LSN"), else add
// refuses it. An event below the latest LSN is left to the history pass.
// add copies what it keeps: r stays the caller's (its placeholders may be
// filled in place).
func (b *batch) add(r row) error {
	b.events++
	i, ok := b.index[r.key]
	if !ok {
		b.index[r.key] = b.rows.add(&r)
		return nil
	}
	cur := b.rows.at(i)
	switch {
	case r.lsn == cur.lsn:
		if !sameEvent(&r, cur) {
			return b.conflict(&r, cur.rec)
		}
	case r.lsn > cur.lsn:
		if r.unchanged {
			if err := keepUnchanged(b.m, &r, cur); err != nil {
				return err
			}
		}
		vals := cur.vals
		copy(vals, r.vals)
		*cur = r
		cur.vals = vals
	default:
		b.outOfOrder[i] = true
	}
	return nil
}

// chunkRows is the number of rows a rowStore allocates at a time.
const chunkRows = 1024

// rowStore holds rows, and their values, in chunks: adding one never
// copies the others, and the store owns the values it holds.
type rowStore struct {
	cols   int // values per row
	chunks [][]row
	vals   [][]value // one slab per chunk, cols values per row
	n      int
}

// add copies r, values included, and returns its index.
func (s *rowStore) add(r *row) int32 {
	if s.n%chunkRows == 0 {
		s.chunks = append(s.chunks, make([]row, 0, chunkRows))
		s.vals = append(s.vals, make([]value, chunkRows*s.cols))
	}
	c := len(s.chunks) - 1
	k := s.n % chunkRows
	vals := s.vals[c][k*s.cols : (k+1)*s.cols : (k+1)*s.cols]
	copy(vals, r.vals)
	s.chunks[c] = append(s.chunks[c], *r)
	s.chunks[c][k].vals = vals
	s.n++
	return int32(s.n - 1)
}

func (s *rowStore) at(i int32) *row { return &s.chunks[i/chunkRows][i%chunkRows] }

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
	out := make([]*row, b.len())
	for i := range out {
		out[i] = b.at(int32(i))
	}
	slices.SortFunc(out, func(x, y *row) int { return compareKeys(b.m, x, y) })
	return out
}
