package cdc

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"hash/maphash"
	"slices"
	"strconv"
	"strings"

	"github.com/changesink/changesink/internal/outcome"
)

// batch holds the latest event per key of one batch: memory grows with the
// number of keys (one row each), never with the events of a key.
//
// Events are merged in file order, which is commit order and then change
// order (pgoutput sends whole transactions at their commit; docs/cdc.md). Each
// is stamped with its version (order.go); the higher version wins, and two
// different events of a key at one version are refused, except two changes
// of one transaction that share its floor, where the later one in the file
// wins.
//
// A key can briefly have two live rows in the source: a deferrable primary
// key swapped or shifted inside one transaction (UPDATE … SET id = CASE …)
// arrives as DELETE old / CREATE new pairs, and a CREATE can come while
// the key's old row is still live. The batch follows the physical rows of
// such a key (keyMeta, dual): a delete removes the row its before image
// (REPLICA IDENTITY FULL) names. What the batch cannot tell is refused,
// naming the keys (ErrKeyChange); what depends on the target (was the key
// live before its first CREATE?) is checked once the target is read
// (checkKeyChanges).
type batch struct {
	m      *Mapping
	seed   maphash.Seed
	index  map[string]int32 // key bytes → index into rows
	rows   rowStore         // the latest event of each key, in first-seen order
	events int64
	// outOfOrder marks keys that got an event with a version below their
	// latest one (a batch not in commit order, hand-made): their versions
	// are checked by a second pass (history).
	outOfOrder map[int32]bool

	ord orderer
	// sum is the digest: SHA-256 of the events' sums (eventSum) in file
	// order; sums waits for it, written a block at a time.
	sum  hash.Hash
	sums []byte
	// img is the before image of the delete being merged (nil: none, or
	// one that does not tell rows apart); scratch its storage, marker the
	// delete's own values (markerOf).
	img, scratch, marker []value

	// trunc is the latest TRUNCATE event (nil: none): every key older than
	// it is deleted, in the batch and in the target.
	trunc *row
	// duals are the keys that have two live rows at this point of the
	// batch, by index; seeds are such keys left open by the previous batch
	// (from the ledger), by key bytes, until the batch meets them.
	duals map[int32]*dual
	seeds map[string]*seedDual
	// first and last are the transactions of the first and last event;
	// lastFloor is the last event's commit floor, when lastFloorSet.
	first, last  txMark
	lastFloor    uint64
	lastFloorSet bool
	// lastCommit is the last event's lsn_commit (when lastCommitSet), of
	// record lastRec: every change of one transaction carries the same.
	lastCommit    uint64
	lastCommitSet bool
	lastRec       int64
	// maxCommit is the highest lsn_commit so far, of record maxCommitRec
	// (0: none): transactions arrive in commit order, so it never goes down.
	maxCommit    uint64
	maxCommitRec int64
}

// txMark is an event's transaction, when it carried one.
type txMark struct {
	id  int64
	set bool
}

func markOf(c *change) txMark { return txMark{c.txID, c.txIDSet} }

// keyMeta is what the batch knows about how a key's history began: a key
// whose first event is a CREATE may have had a live row before it (a
// deferred key change), which only the target can tell.
type keyMeta struct {
	firstVer uint64 // the version of the key's first event
	createTx int64  // the transaction of that CREATE, when flagCreate
	flags    uint8
}

const (
	// flagCreate: the key's first event in the batch is a CREATE.
	flagCreate uint8 = 1 << iota
	// flagCreateOpen: nothing has followed that CREATE for this key yet
	// (the key may hold a second, older row until its transaction ends).
	flagCreateOpen
	// flagAmbiguous: the events after that CREATE are right only if the key
	// had no live row before it.
	flagAmbiguous
	// flagFirstUnfloored: the first event's version may still be raised
	// to the ledger's snapshot (order.go).
	flagFirstUnfloored
)

// dual is a key with two (or more) live rows inside transaction tx: the
// batch's row for the key (the newest) and others.
type dual struct {
	tx     int64
	others []image
}

// image is a live row of a key: its values when the batch saw them, else
// only their hash (a row left open by the previous batch).
type image struct {
	vals []value
	sum  uint64
}

// seedDual is a key the previous batch left with two live rows: the target
// holds its newest row (vals, at version), the others are known by hash.
type seedDual struct {
	shown   string
	tx      int64
	vals    []value
	version uint64
	others  []uint64
	met     bool
}

func newBatch(m *Mapping) *batch {
	b := &batch{m: m, seed: maphash.MakeSeed()}
	b.reset()
	return b
}

func (b *batch) reset() {
	b.index, b.rows, b.events, b.outOfOrder = map[string]int32{}, rowStore{cols: len(b.m.cols)}, 0, map[int32]bool{}
	b.ord, b.sum, b.sums, b.trunc, b.duals, b.first, b.last = orderer{}, sha256.New(), b.sums[:0], nil, map[int32]*dual{}, txMark{}, txMark{}
	b.lastFloor, b.lastFloorSet = 0, false
	b.maxCommit, b.maxCommitRec = 0, 0
	for _, s := range b.seeds {
		s.met = false
	}
}

// len is the number of keys; at returns the row of the i-th key seen.
func (b *batch) len() int        { return b.rows.n }
func (b *batch) at(i int32) *row { return b.rows.at(i) }

// digest is the hex SHA-256 of the batch's event sums (eventSum, xxHash64
// of each decoded event, computed by the decoding workers) in file order:
// the same for the text and binary form of one batch, and for a
// re-delivery that differs only in processing times.
func (b *batch) digest() string {
	b.flushSums()
	return hex.EncodeToString(b.sum.Sum(nil))
}

// fold adds an event's sum to the digest, in order.
func (b *batch) fold(sum uint64) {
	b.sums = binary.LittleEndian.AppendUint64(b.sums, sum)
	if len(b.sums) >= 4096 {
		b.flushSums()
	}
}

func (b *batch) flushSums() {
	b.sum.Write(b.sums)
	b.sums = b.sums[:0]
}

// markerOf turns a delete fresh from the decoder into the seed's marker
// (zeros but the key) and returns its before image (nil when it does not
// tell rows apart). The caller's values are left as they are: r's values
// become the batch's marker buffer; both are valid until the next call.
func (b *batch) markerOf(r *row) []value {
	if !r.deleted || len(r.vals) == 0 { // a TRUNCATE has no values
		return nil
	}
	var img []value
	if r.change.image {
		b.scratch = append(b.scratch[:0], r.vals...)
		img = b.scratch
	}
	b.marker = append(b.marker[:0], r.vals...)
	for i := range b.m.cols {
		if !b.m.cols[i].isKey {
			b.marker[i] = zeroValue(b.m.cols[i].typ)
		}
	}
	r.vals = b.marker
	r.change.image = false
	return img
}

// add merges one event, in file order (commit order, then change order:
// order.go stamps its version). A later event becomes its key's row (its
// unchanged TOAST values taken from the row it replaces: keepUnchanged),
// through accept, which follows key changes; an event at the key's latest
// version must carry the same payload (seed: "Conflicting changes share an
// id and LSN"), else add refuses it. An event below the latest version is
// left to the history pass. add copies what it keeps: r (and its values)
// stay the caller's (its placeholders may be filled in place).
func (b *batch) add(r row) error {
	b.events++
	b.fold(r.change.sum)
	b.img = b.markerOf(&r)
	b.ord.stamp(&r)
	if b.events == 1 {
		b.first = markOf(&r.change)
	} else if err := b.sameCommit(&r); err != nil {
		return err
	}
	b.last, b.lastFloor, b.lastFloorSet = markOf(&r.change), r.change.floor, r.change.floorSet
	b.lastCommit, b.lastCommitSet, b.lastRec = r.change.commit, r.change.commitSet, r.rec
	if r.change.commitSet && (b.maxCommitRec == 0 || r.change.commit > b.maxCommit) {
		b.maxCommit, b.maxCommitRec = r.change.commit, r.rec
	}
	if r.change.operation == opTruncate {
		b.truncate(&r)
		return nil
	}
	i, ok := b.index[r.key]
	if !ok {
		if s := b.seeds[r.key]; s != nil && !s.met {
			s.met = true
			i = b.newKey(&row{key: r.key, lsn: s.version, vals: s.vals, change: change{txID: s.tx, txIDSet: true}}, 0)
			d := &dual{tx: s.tx}
			for _, sum := range s.others {
				d.others = append(d.others, image{sum: sum})
			}
			b.duals[i] = d
			return b.accept(i, b.at(i), &r)
		}
		var flags uint8
		if r.change.operation == opCreate {
			flags = flagCreate | flagCreateOpen
		}
		if r.change.unfloored() {
			flags |= flagFirstUnfloored
		}
		b.newKey(&r, flags)
		return nil
	}
	cur := b.rows.at(i)
	switch {
	case r.lsn == cur.lsn && sameEvent(&r, cur):
		return nil // an exact repeat
	case r.lsn == cur.lsn && !floorTie(&r, cur):
		return b.conflict(&r, cur.rec)
	case r.lsn == cur.lsn && r.change.lsn < cur.change.lsn:
		// A floor tie is won by the later change, which the file order
		// tells only when the transaction's LSNs go up (WAL order).
		e := rowError(b.m, &r, fmt.Errorf("%w: this change of transaction %d shares its version with record %d (both were written before the transaction's commit floor, where the later change wins) but has a lower LSN than that record's LSN %d: "+
			"Debezium sends a transaction's changes in WAL order, so the records were reordered; replay the batch as the trigger wrote it, or fix the replay file. Nothing was written",
			ErrContradiction, r.change.txID, cur.rec, cur.change.lsn))
		e.Column = b.m.Source.MetadataField + ".source.lsn"
		return e
	case r.lsn < cur.lsn:
		if b.duals[i] != nil {
			return b.keyChange(&r, "its events are not in commit order")
		}
		b.outOfOrder[i] = true
		return nil
	}
	if r.unchanged && b.duals[i] == nil { // with two live rows, accept refuses all but a delete
		if err := keepUnchanged(b.m, &r, cur); err != nil {
			return err
		}
	}
	return b.accept(i, cur, &r)
}

// sameCommit refuses an event of the previous event's transaction with
// another lsn_commit (Debezium writes one for all of a transaction's
// changes: a transaction arrives whole, at its commit), and an lsn_commit
// below an earlier event's (transactions arrive in commit order). The
// version of each change is raised to its lsn_commit (order.go), so either
// would reorder changes: an earlier update outranking a later one.
func (b *batch) sameCommit(r *row) error {
	c := &r.change
	commit := func(n uint64, set bool) string {
		if !set {
			return "null"
		}
		return strconv.FormatUint(n, 10)
	}
	var err error
	switch {
	case c.txIDSet && b.last.set && c.txID == b.last.id && (c.commitSet != b.lastCommitSet || c.commit != b.lastCommit):
		err = fmt.Errorf("%w: transaction %d has lsn_commit %s in metadata.source.sequence, but %s in record %d (Debezium writes one lsn_commit for all of a transaction's changes); "+
			"replay the batch as the trigger wrote it, or fix the replay file. Nothing was written",
			ErrContradiction, c.txID, commit(c.commit, c.commitSet), commit(b.lastCommit, b.lastCommitSet), b.lastRec)
	case c.commitSet && b.maxCommitRec != 0 && c.commit < b.maxCommit:
		err = fmt.Errorf("%w: lsn_commit %d in metadata.source.sequence is below record %d's, %d: transactions arrive in commit order, and each one's lsn_commit is the end of the last COMMIT before it, so it never goes down in a batch (the records were reordered or edited); "+
			"replay the batch as the trigger wrote it, or fix the replay file. Nothing was written",
			ErrContradiction, c.commit, b.maxCommitRec, b.maxCommit)
	default:
		return nil
	}
	e := &RecordError{Record: r.rec, Offset: -1, LSN: c.lsn, Column: b.m.Source.MetadataField + ".source.sequence", Err: err}
	if len(r.vals) > 0 {
		e.Key = renderKey(b.m, r.vals)
	}
	return e
}

func (b *batch) newKey(r *row, flags uint8) int32 {
	i := b.rows.add(r, keyMeta{firstVer: r.lsn, createTx: r.change.txID, flags: flags})
	b.index[r.key] = i
	return i
}

// set makes r the key's row (values copied into the row the store owns).
func set(cur, r *row) {
	vals := cur.vals
	copy(vals, r.vals)
	*cur = *r
	cur.vals = vals
}

// accept applies r, a later event than cur, to key i.
func (b *batch) accept(i int32, cur, r *row) error {
	if d := b.duals[i]; d != nil {
		return b.dualEvent(i, cur, r, d)
	}
	km := b.rows.metaAt(i)
	open := km.flags&flagCreateOpen != 0
	inCreateTx := open && r.change.txIDSet && r.change.txID == km.createTx
	if open {
		km.flags &^= flagCreateOpen
	}
	switch r.change.operation {
	case opCreate:
		if !cur.deleted {
			// A CREATE while the key's row is live: a deferred key change;
			// the key has two rows until a delete removes one.
			if !r.change.txIDSet {
				return b.keyChange(r, "a CREATE of a live key without a transaction id (metadata.source.txId)")
			}
			if open {
				// The row it joins may itself have joined an older one.
				km.flags |= flagAmbiguous
			}
			b.duals[i] = &dual{tx: r.change.txID, others: []image{{vals: slices.Clone(cur.vals)}}}
		}
	case opDelete:
		if inCreateTx && !cur.deleted && b.img != nil && !sameImage(b.m, b.img, cur.vals) {
			// The key was created in this transaction, and the delete
			// removes a row other than that one: the key had an older row
			// (a swapped or shifted deferrable key); the new row stays.
			keepRow(cur, r)
			return nil
		}
		if inCreateTx {
			km.flags |= flagAmbiguous
		}
	default:
		if open {
			km.flags |= flagAmbiguous
		}
	}
	if open && !inCreateTx {
		km.flags |= flagAmbiguous
	}
	set(cur, r)
	return nil
}

// keepRow keeps cur's values and liveness at r's place in the history (a
// delete that removed another physical row of the key).
func keepRow(cur, r *row) {
	cur.lsn, cur.rec, cur.change = r.lsn, r.rec, r.change
}

// dualEvent applies r to a key with two live rows.
func (b *batch) dualEvent(i int32, cur, r *row, d *dual) error {
	if !r.change.txIDSet || r.change.txID != d.tx {
		return b.keyChange(r, fmt.Sprintf("transaction %d ended with two live rows of this key (a CREATE while its row was live, and no delete of one of them)", d.tx))
	}
	if r.change.operation != opDelete {
		return b.keyChange(r, fmt.Sprintf("%s while the key has two live rows inside transaction %d: which row it changed is not in the batch", opName(r), d.tx))
	}
	if b.img == nil {
		// A delete of nothing but the key (REPLICA IDENTITY DEFAULT): fine
		// only when every live row is the same.
		for _, o := range d.others {
			if o.vals == nil || !sameImage(b.m, o.vals, cur.vals) {
				return b.keyChange(r, "a delete with only the key (REPLICA IDENTITY DEFAULT) while the key has two different live rows: which one it removed is not in the batch; set REPLICA IDENTITY FULL on the source table")
			}
		}
		b.dropOther(i, cur, r, d, 0)
		return nil
	}
	sum := imageSum(b.m, b.img)
	for n, o := range d.others {
		if (o.vals != nil && sameImage(b.m, o.vals, b.img)) || (o.vals == nil && o.sum == sum) {
			b.dropOther(i, cur, r, d, n)
			return nil
		}
	}
	if !sameImage(b.m, cur.vals, b.img) {
		return b.keyChange(r, "a delete whose before image is none of the key's live rows")
	}
	// The delete removed the newest row: the key is back to another one.
	last := d.others[len(d.others)-1]
	if last.vals == nil {
		return b.keyChange(r, "a delete of the row this key got in the previous batch, leaving a row whose values that batch did not hold")
	}
	copy(cur.vals, last.vals)
	d.others = d.others[:len(d.others)-1]
	keepRow(cur, r)
	if len(d.others) == 0 {
		delete(b.duals, i)
	}
	return nil
}

// dropOther removes d.others[n] (a delete removed it): the key keeps its row.
func (b *batch) dropOther(i int32, cur, r *row, d *dual, n int) {
	d.others = slices.Delete(d.others, n, n+1)
	keepRow(cur, r)
	if len(d.others) == 0 {
		delete(b.duals, i)
	}
}

// opName names the event's operation with its article ("an UPDATE").
func opName(r *row) string {
	switch op := r.change.operation; {
	case op == "":
		return "a change"
	case strings.ContainsRune("AEIOU", rune(op[0])):
		return "an " + op
	default:
		return "a " + op
	}
}

// truncate applies a TRUNCATE event: every key older than it is deleted
// (the target's keys too: truncateKeys).
func (b *batch) truncate(r *row) {
	t := *r
	b.trunc = &t
	for i := range int32(b.rows.n) {
		cur := b.rows.at(i)
		if cur.lsn < r.lsn {
			cur.lsn, cur.rec, cur.deleted, cur.change = r.lsn, r.rec, true, r.change
			for c := range b.m.cols {
				if !b.m.cols[c].isKey {
					cur.vals[c] = zeroValue(b.m.cols[c].typ)
				}
			}
		}
		b.rows.metaAt(i).flags &^= flagCreate | flagCreateOpen | flagAmbiguous
		delete(b.duals, i)
	}
	for _, s := range b.seeds {
		s.met = true // its rows are gone
	}
}

// keyChange refuses a key-change shape the batch does not determine.
func (b *batch) keyChange(r *row, why string) error {
	e := rowError(b.m, r, fmt.Errorf("%w: key %s: %s", ErrKeyChange, renderKey(b.m, r.vals), why))
	return e
}

// sameImage compares two row images by their non-key columns.
func sameImage(m *Mapping, a, b []value) bool {
	for i := range m.cols {
		if !m.cols[i].isKey && !a[i].equal(b[i]) {
			return false
		}
	}
	return true
}

// imageSum is a stable hash of an image's non-key columns (a row carried
// from one batch to the next by the ledger).
func imageSum(m *Mapping, vals []value) uint64 {
	h := sha256.New()
	var b [9]byte
	for i := range m.cols {
		if m.cols[i].isKey {
			continue
		}
		v := vals[i]
		binary.LittleEndian.PutUint64(b[:8], v.n)
		b[8] = 0
		if v.null {
			b[8] = 1
		}
		h.Write(b[:])
		binary.LittleEndian.PutUint64(b[:8], uint64(len(v.s)))
		h.Write(b[:8])
		h.Write([]byte(v.s))
	}
	return binary.LittleEndian.Uint64(h.Sum(nil))
}

// openDual is a key left with two live rows at the end of the batch, its
// transaction continuing in the next batch (the ledger carries it).
type openDual struct {
	Key    string   `json:"key"`   // hex of the key bytes
	Shown  string   `json:"shown"` // the key as messages render it
	Tx     int64    `json:"tx"`
	Others []string `json:"others"` // hex hashes of the rows the target does not hold
}

// finishKeys ends the batch's key-change tracking: a key that still has two
// live rows is carried to the next batch when the batch ends inside that
// transaction, and refused when the transaction ended. Keys the previous
// batch left open must be met in the same transaction.
func (b *batch) finishKeys() ([]openDual, error) {
	var open []openDual
	for i, d := range b.duals {
		r := b.at(i)
		if !b.last.set || b.last.id != d.tx {
			return nil, b.keyChange(r, fmt.Sprintf("transaction %d left two live rows of this key (a CREATE while its row was live, and no delete of one of them before the transaction's end)", d.tx))
		}
		od := openDual{Key: hex.EncodeToString([]byte(r.key)), Shown: renderKey(b.m, r.vals), Tx: d.tx}
		for _, o := range d.others {
			sum := o.sum
			if o.vals != nil {
				sum = imageSum(b.m, o.vals)
			}
			od.Others = append(od.Others, fmt.Sprintf("%016x", sum))
		}
		open = append(open, od)
	}
	for k, s := range b.seeds {
		if s.met {
			continue
		}
		if !b.first.set || b.first.id != s.tx || !b.last.set || b.last.id != s.tx {
			return nil, outcome.Refused.Mark(&RecordError{Offset: -1, Key: s.shown, Err: fmt.Errorf(
				"%w: key %s: the previous batch ended inside transaction %d with two live rows of this key, and this batch does not continue that transaction to its end with a delete of one of them",
				ErrKeyChange, s.shown, s.tx)})
		}
		od := openDual{Key: hex.EncodeToString([]byte(k)), Shown: s.shown, Tx: s.tx}
		for _, sum := range s.others {
			od.Others = append(od.Others, fmt.Sprintf("%016x", sum))
		}
		open = append(open, od)
	}
	return open, nil
}

// chunkRows is the number of rows a rowStore allocates at a time.
const chunkRows = 1024

// rowStore holds rows, and their values, in chunks: adding one never
// copies the others, and the store owns the values it holds.
type rowStore struct {
	cols   int // values per row
	chunks [][]row
	vals   [][]value   // one slab per chunk, cols values per row
	meta   [][]keyMeta // per chunk, the batch's bookkeeping of each row's key
	n      int
}

// add copies r, values included, and returns its index; km is its key's
// bookkeeping (metaAt).
func (s *rowStore) add(r *row, km keyMeta) int32 {
	if s.n%chunkRows == 0 {
		s.chunks = append(s.chunks, make([]row, 0, chunkRows))
		s.vals = append(s.vals, make([]value, chunkRows*s.cols))
		s.meta = append(s.meta, make([]keyMeta, 0, chunkRows))
	}
	c := len(s.chunks) - 1
	k := s.n % chunkRows
	vals := s.vals[c][k*s.cols : (k+1)*s.cols : (k+1)*s.cols]
	copy(vals, r.vals)
	s.chunks[c] = append(s.chunks[c], *r)
	s.chunks[c][k].vals = vals
	s.meta[c] = append(s.meta[c], km)
	s.n++
	return int32(s.n - 1)
}

func (s *rowStore) at(i int32) *row         { return &s.chunks[i/chunkRows][i%chunkRows] }
func (s *rowStore) metaAt(i int32) *keyMeta { return &s.meta[i/chunkRows][i%chunkRows] }

func (b *batch) conflict(r *row, other int64) error {
	e := rowError(b.m, r, ErrConflict)
	e.Other = other
	return e
}

// rowError locates err at a batch row: its record, key, LSN and version.
func rowError(m *Mapping, r *row, err error) *RecordError {
	e := &RecordError{Record: r.rec, Offset: -1, Key: renderKey(m, r.vals), LSN: r.change.lsn, Err: err}
	if e.LSN == 0 {
		e.LSN = r.lsn
	}
	if r.lsn != e.LSN {
		e.Version = r.lsn
	}
	return e
}

// history is the second pass for keys whose events came out of version
// order: it keeps a 64-bit hash of every version of those keys only, and
// refuses two different events at one key and version. A hash collision
// could hide such a conflict with probability 2^-64; equal versions are
// never refused.
type history struct {
	b    *batch
	ord  orderer
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

func (h *history) reset() { h.seen, h.ord = map[olderKey]olderVersion{}, orderer{} }

func (h *history) check(r row) error {
	h.b.markerOf(&r)
	h.ord.stamp(&r)
	if r.change.operation == opTruncate {
		return nil
	}
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

// floorAt places the rows the batch could not floor (the first transaction
// after a snapshot that an earlier batch held) after that snapshot, the
// ledger's snapshot LSN; 0 leaves them at their LSNs.
func (b *batch) floorAt(snapshot uint64) {
	if snapshot == 0 {
		return
	}
	up := func(r *row) {
		if r.change.unfloored() {
			r.change.floor, r.change.floorSet = snapshot, true
			r.lsn = max(r.lsn, raise(r.change.lsn, snapshot))
		}
	}
	for i := range int32(b.rows.n) {
		up(b.rows.at(i))
		if km := b.rows.metaAt(i); km.flags&flagFirstUnfloored != 0 {
			km.firstVer = max(km.firstVer, raise(km.firstVer, snapshot))
		}
	}
	if b.trunc != nil {
		up(b.trunc)
	}
	if !b.lastFloorSet && b.events > 0 {
		b.lastFloor, b.lastFloorSet = snapshot, true
	}
}

// checkKeyChanges finishes the key-change checks once the target's
// versions are read: a key whose first event in the batch is a CREATE
// while the target holds it live (below that CREATE's version) had a
// second row; that is right only when a delete in the same transaction
// removed the old row (the batch saw it: resolved), or when the batch ends
// inside that transaction (the key is carried to the next batch, open).
// It returns the keys left open.
func (b *batch) checkKeyChanges(ctx context.Context, t *table, current map[string]*row) ([]openDual, error) {
	m := b.m
	var carried []*row
	var carriedTx []int64
	for i := range int32(b.rows.n) {
		km := *b.rows.metaAt(i)
		if km.flags&flagCreate == 0 {
			continue
		}
		r := b.at(i)
		cur := current[r.key]
		if cur == nil || cur.deleted || cur.lsn >= km.firstVer {
			continue
		}
		switch {
		case km.flags&flagCreateOpen != 0 && b.last.set && b.last.id == km.createTx:
			carried = append(carried, r)
			carriedTx = append(carriedTx, km.createTx)
		case km.flags&(flagCreateOpen|flagAmbiguous) != 0:
			return nil, outcome.Refused.Mark(b.keyChange(r, fmt.Sprintf(
				"the target holds this key live (version %d) and this batch creates it again in transaction %d; that is a deferred key change (a swap or shift of a DEFERRABLE primary key) only if a delete in the same transaction removes the old row, and here the batch holds no such delete (it deletes the new row, holds only the key in its before image, or updates one of the two rows), "+
					"or a TRUNCATE that the trigger did not pass (Debezium's default skipped.operations=t drops it). Set REPLICA IDENTITY FULL on the source table and skipped.operations: none on the trigger, then rebuild the target (a new snapshot)",
				cur.lsn, km.createTx)))
		}
	}
	open, err := b.finishKeys()
	if err != nil {
		return nil, outcome.Refused.Mark(err)
	}
	if len(carried) > 0 {
		old, err := t.read(ctx, carried)
		if err != nil {
			return nil, err
		}
		for n, r := range carried {
			o := old[r.key]
			if o == nil {
				return nil, outcome.Refused.Mark(b.keyChange(r, "the target's row of this key vanished while the batch ran (another writer?)"))
			}
			open = append(open, openDual{Key: hex.EncodeToString([]byte(r.key)), Shown: renderKey(m, r.vals), Tx: carriedTx[n],
				Others: []string{fmt.Sprintf("%016x", imageSum(m, o.vals))}})
		}
	}
	// In key order, so that the ledger's open_keys of a batch is the same
	// text on every run.
	slices.SortFunc(open, func(a, b openDual) int { return strings.Compare(a.Key, b.Key) })
	return open, nil
}

// entry is the ledger row of this batch, applied after prev.
func (b *batch) entry(holder string, src sourceID, expected []*row, pending int, open []openDual, prev *ledgerEntry) *ledgerEntry {
	e := &ledgerEntry{kind: ledgerBatch, digest: b.digest(), holder: holder, source: src, events: uint64(b.events), keys: uint64(len(expected)),
		pending: uint64(pending), openKeys: open, snapshotLSN: b.ord.snapshot,
		lastTx: b.last.id, lastTxSet: b.last.set, lastFloor: b.lastFloor}
	for n, r := range expected {
		if n == 0 || r.lsn < e.minVersion {
			e.minVersion = r.lsn
		}
		e.maxVersion = max(e.maxVersion, r.lsn)
	}
	if b.trunc != nil {
		e.maxVersion = max(e.maxVersion, b.trunc.lsn)
		if len(expected) == 0 {
			e.minVersion = b.trunc.lsn
		}
	}
	e.highVersion = e.maxVersion
	if prev != nil {
		e.highVersion = max(e.highVersion, prev.highVersion)
		e.snapshotLSN = max(e.snapshotLSN, prev.snapshotLSN)
	}
	return e
}
