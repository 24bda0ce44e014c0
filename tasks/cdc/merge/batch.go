package merge

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"hash/maphash"
	"slices"
	"strconv"
	"strings"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"

	"github.com/changesink/changesink/internal/outcome"
)

// Batch holds the latest event per key of one batch: memory grows with the
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
// (CheckKeyChanges).
type Batch struct {
	M      *mapping.Mapping
	seed   maphash.Seed
	index  map[string]int32 // key bytes → index into rows
	rows   rowStore         // the latest event of each key, in first-seen order
	Events int64
	// OutOfOrder marks keys that got an event with a version below their
	// latest one (a batch not in commit order, hand-made): their versions
	// are checked by a second pass (history).
	OutOfOrder map[int32]bool

	ord change.Orderer
	// sum is the digest: SHA-256 of the events' sums (change.EventSum) in file
	// order; sums waits for it, written a block at a time.
	sum  hash.Hash
	sums []byte
	// img is the before image of the delete being merged (nil: none, or
	// one that does not tell rows apart); scratch its storage, marker the
	// delete's own values (markerOf).
	img, scratch, marker []change.Value

	// Trunc is the latest TRUNCATE event (nil: none): every key older than
	// it is deleted, in the batch and in the target.
	Trunc *change.Row
	// duals are the keys that have two live rows at this point of the
	// batch, by index; seeds are such keys left open by the previous batch
	// (from the ledger), by key bytes, until the batch meets them.
	duals map[int32]*dual
	Seeds map[string]*SeedDual
	// Recreated is the keys created again while live, and left so by
	// their transaction (recreated.go).
	Recreated Recreated
	// first and last are the transactions of the first and last event;
	// lastFloor is the last event's commit floor, when lastFloorSet.
	first, last  change.TxMark
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

// keyMeta is what the batch knows about how a key's history began: a key
// whose first event is a CREATE may have had a live row before it (a
// deferred key change), which only the target can tell.
type keyMeta struct {
	firstVer  uint64 // the version of the key's first event
	createTx  int64  // the transaction of that CREATE, when flagCreate
	createRec int64  // its record
	flags     uint8
}

const (
	// flagCreate: the key's first event in the batch is a CREATE.
	flagCreate uint8 = 1 << iota
	// flagCreateOpen: nothing has followed that CREATE for this key yet
	// (the key may hold a second, older row until its transaction ends).
	flagCreateOpen
	// flagAmbiguous: an event of the CREATE's transaction after it is
	// right only if the key had no live row before it (which row did it
	// change?).
	flagAmbiguous
	// flagFirstUnfloored: the first event's version may still be raised
	// to the ledger's snapshot (order.go).
	flagFirstUnfloored
	// flagOlderDeleted: a delete of the CREATE's transaction removed the
	// key's older row (its before image is not the CREATE's row).
	flagOlderDeleted
)

// dual is a key with two (or more) live rows inside transaction tx, since
// the CREATE of record rec: the batch's row for the key (the newest) and
// others.
type dual struct {
	tx     int64
	rec    int64
	shown  string // the key, rendered
	others []image
}

// image is a live row of a key: its values when the batch saw them, else
// only their hash (a row left open by the previous batch).
type image struct {
	vals []change.Value
	sum  uint64
}

// SeedDual is a key the previous batch left with two live rows: the target
// holds its newest row (vals, at version), the others are known by hash.
type SeedDual struct {
	key     string
	shown   string
	Tx      int64
	vals    []change.Value
	Version uint64
	Others  []uint64
	met     bool
}

// NewBatch returns an empty batch of m's rows.
func NewBatch(m *mapping.Mapping) *Batch {
	b := &Batch{M: m, seed: maphash.MakeSeed()}
	b.Reset()
	return b
}

// Reset empties the batch for a decode that starts again from the first
// record; the seeds the previous batch left stay, none of them met.
func (b *Batch) Reset() {
	b.index, b.rows, b.Events, b.OutOfOrder = map[string]int32{}, rowStore{cols: len(b.M.Cols)}, 0, map[int32]bool{}
	b.ord, b.sum, b.sums, b.Trunc, b.duals, b.first, b.last = change.Orderer{}, sha256.New(), b.sums[:0], nil, map[int32]*dual{}, change.TxMark{}, change.TxMark{}
	b.lastFloor, b.lastFloorSet = 0, false
	b.maxCommit, b.maxCommitRec = 0, 0
	b.Recreated = Recreated{}
	for _, s := range b.Seeds {
		s.met = false
	}
}

// Has reports whether the batch holds key.
func (b *Batch) Has(key string) bool {
	_, ok := b.index[key]
	return ok
}

// keys is the number of keys; row returns the row of the i-th key seen.
func (b *Batch) keys() int               { return b.rows.n }
func (b *Batch) row(i int32) *change.Row { return b.rows.at(i) }

// Row returns the batch's latest row of key, nil when it holds none.
func (b *Batch) Row(key string) *change.Row {
	i, ok := b.index[key]
	if !ok {
		return nil
	}
	return b.rows.at(i)
}

// Digest is the hex SHA-256 of the batch's event sums (change.EventSum,
// xxHash64 of each decoded event, computed by the decoding workers) in file
// order: the same for the text and binary form of one batch, and for a
// re-delivery that differs only in processing times.
func (b *Batch) Digest() string {
	b.flushSums()
	return hex.EncodeToString(b.sum.Sum(nil))
}

// fold adds an event's sum to the digest, in order.
func (b *Batch) fold(sum uint64) {
	b.sums = binary.LittleEndian.AppendUint64(b.sums, sum)
	if len(b.sums) >= 4096 {
		b.flushSums()
	}
}

func (b *Batch) flushSums() {
	b.sum.Write(b.sums)
	b.sums = b.sums[:0]
}

// markerOf turns a delete fresh from the decoder into the seed's marker
// (zeros but the key) and returns its before image (nil when it does not
// tell rows apart). The caller's values are left as they are: r's values
// become the batch's marker buffer; both are valid until the next call.
func (b *Batch) markerOf(r *change.Row) []change.Value {
	if !r.Deleted || len(r.Vals) == 0 { // a TRUNCATE has no values
		return nil
	}
	var img []change.Value
	if r.Meta.Image {
		b.scratch = append(b.scratch[:0], r.Vals...)
		img = b.scratch
	}
	b.marker = append(b.marker[:0], r.Vals...)
	for i := range b.M.Cols {
		if !b.M.Cols[i].IsKey {
			b.marker[i] = change.Zero(b.M.Cols[i].Type)
		}
	}
	r.Vals = b.marker
	r.Meta.Image = false
	return img
}

// Add merges one event, in file order (commit order, then change order:
// order.go stamps its version). A later event becomes its key's row (its
// unchanged TOAST values taken from the row it replaces: keepUnchanged),
// through accept, which follows key changes; an event at the key's latest
// version must carry the same payload (seed: "Conflicting changes share an
// id and LSN"), else add refuses it. An event below the latest version is
// left to the history pass. add copies what it keeps: r (and its values)
// stay the caller's (its placeholders may be filled in place).
func (b *Batch) Add(r change.Row) error {
	if err := b.add(r); err != nil {
		return err
	}
	if r.Meta.SnapshotEnd() && !b.M.Source.PartialSnapshots {
		b.endSnapshot(&r)
	}
	return nil
}

// endSnapshot ends a complete snapshot of the table at its point S (r,
// its last row): every row the table held at S was read at S, in this
// batch or in the batches before it (a snapshot cut between batches), so
// a key live below S that the snapshot did not read was deleted before
// S (a TRUNCATE the trigger dropped, deletes before its offsets were
// reset). It is applied as a TRUNCATE at S: the batch's keys below S are
// deleted, and the target's (Trunc: readTarget's markers); the
// snapshot's rows, at S, and every change after it stay.
func (b *Batch) endSnapshot(r *change.Row) {
	m := r.Meta
	// At S exactly, as the snapshot's rows: floored just below it, so that
	// FloorAt (the ledger's snapshot) never raises it above them.
	b.truncate(&change.Row{Record: r.Record, Version: m.LSN, Deleted: true,
		Meta: change.Meta{Op: change.OpTruncate, LSN: m.LSN, TxID: m.TxID, TxIDSet: m.TxIDSet, Snapshot: m.Snapshot,
			Floor: m.LSN - 1, FloorSet: true}})
}

func (b *Batch) add(r change.Row) error {
	b.Events++
	b.fold(r.Meta.Sum)
	b.img = b.markerOf(&r)
	b.ord.Stamp(&r)
	if b.Events == 1 {
		b.first = change.MarkOf(&r.Meta)
	} else if err := b.sameCommit(&r); err != nil {
		return err
	}
	b.last, b.lastFloor, b.lastFloorSet = change.MarkOf(&r.Meta), r.Meta.Floor, r.Meta.FloorSet
	b.lastCommit, b.lastCommitSet, b.lastRec = r.Meta.Commit, r.Meta.CommitSet, r.Record
	if r.Meta.CommitSet && (b.maxCommitRec == 0 || r.Meta.Commit > b.maxCommit) {
		b.maxCommit, b.maxCommitRec = r.Meta.Commit, r.Record
	}
	if r.Meta.Op == change.OpTruncate {
		b.truncate(&r)
		return nil
	}
	i, ok := b.index[r.Key]
	if !ok {
		s := b.Seeds[r.Key]
		if s == nil || s.met {
			b.newKey(&r, firstFlags(&r))
			return nil
		}
		i = b.seedKey(s)
		if r.Meta.TxIDSet && r.Meta.TxID == s.Tx {
			return b.accept(i, b.row(i), &r)
		}
		b.resolve(i, b.duals[i]) // s.Tx ended with both rows: the target's is the key's
	}
	cur := b.rows.at(i)
	switch {
	case r.Version == cur.Version && sameEvent(&r, cur):
		return nil // an exact repeat
	case r.Version == cur.Version && !change.FloorTie(&r, cur):
		return b.conflict(&r, cur.Record)
	case r.Version == cur.Version && r.Meta.LSN < cur.Meta.LSN:
		// A floor tie is won by the later change, which the file order
		// tells only when the transaction's LSNs go up (WAL order).
		e := rowError(b.M, &r, fmt.Errorf("%w: this change of transaction %d ties with record %d at the commit floor, "+
			"but its LSN is below that record's LSN %d: the records were reordered", change.ErrContradiction, r.Meta.TxID, cur.Record, cur.Meta.LSN))
		e.Column = b.M.Source.MetadataField + ".source.lsn"
		return e
	case r.Version < cur.Version:
		if b.duals[i] != nil {
			return b.keyChange(&r, "its events are not in commit order")
		}
		b.OutOfOrder[i] = true
		return nil
	}
	if d := b.duals[i]; d != nil && (!r.Meta.TxIDSet || r.Meta.TxID != d.tx) {
		b.resolve(i, d) // a later transaction: d's ended with two live rows
	}
	if r.Unchanged && b.duals[i] == nil { // with two live rows, accept refuses all but a delete
		if err := keepUnchanged(b.M, &r, cur); err != nil {
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
func (b *Batch) sameCommit(r *change.Row) error {
	c := &r.Meta
	commit := func(n uint64, set bool) string {
		if !set {
			return "null"
		}
		return strconv.FormatUint(n, 10)
	}
	var err error
	switch {
	case c.TxIDSet && b.last.Set && c.TxID == b.last.ID && (c.CommitSet != b.lastCommitSet || c.Commit != b.lastCommit):
		err = fmt.Errorf("%w: transaction %d has lsn_commit %s in metadata.source.sequence, but %s in record %d (one transaction, one lsn_commit)",
			change.ErrContradiction, c.TxID, commit(c.Commit, c.CommitSet), commit(b.lastCommit, b.lastCommitSet), b.lastRec)
	case c.CommitSet && b.maxCommitRec != 0 && c.Commit < b.maxCommit:
		err = fmt.Errorf("%w: lsn_commit %d in metadata.source.sequence is below record %d's, %d (transactions arrive in commit order)",
			change.ErrContradiction, c.Commit, b.maxCommitRec, b.maxCommit)
	default:
		return nil
	}
	e := &change.RecordError{Record: r.Record, Offset: -1, LSN: c.LSN, Column: b.M.Source.MetadataField + ".source.sequence", Err: err}
	if len(r.Vals) > 0 {
		e.Key = change.RenderKey(b.M, r.Vals)
	}
	return e
}

func (b *Batch) newKey(r *change.Row, flags uint8) int32 {
	i := b.rows.add(r, keyMeta{firstVer: r.Version, createTx: r.Meta.TxID, createRec: r.Record, flags: flags})
	b.index[r.Key] = i
	return i
}

// firstFlags is the bookkeeping of a key whose first event is r.
func firstFlags(r *change.Row) uint8 {
	var flags uint8
	if r.Meta.Op == change.OpCreate {
		flags = flagCreate | flagCreateOpen
	}
	if r.Meta.Unfloored() {
		flags |= flagFirstUnfloored
	}
	return flags
}

// seedKey starts a key the previous batch left with two live rows in
// transaction s.Tx from the target's row, the newest, and the others.
func (b *Batch) seedKey(s *SeedDual) int32 {
	s.met = true
	i := b.newKey(&change.Row{Key: s.key, Version: s.Version, Vals: s.vals, Meta: change.Meta{TxID: s.Tx, TxIDSet: true}}, 0)
	d := &dual{tx: s.Tx, shown: s.shown}
	for _, sum := range s.Others {
		d.others = append(d.others, image{sum: sum})
	}
	b.duals[i] = d
	return i
}

// set makes r the key's row (values copied into the row the store owns).
func set(cur, r *change.Row) {
	vals := cur.Vals
	copy(vals, r.Vals)
	*cur = *r
	cur.Vals = vals
}

// accept applies r, a later event than cur, to key i.
func (b *Batch) accept(i int32, cur, r *change.Row) error {
	if d := b.duals[i]; d != nil {
		return b.dualEvent(i, cur, r, d)
	}
	km := b.rows.metaAt(i)
	open := km.flags&flagCreateOpen != 0
	inCreateTx := open && r.Meta.TxIDSet && r.Meta.TxID == km.createTx
	if open {
		km.flags &^= flagCreateOpen
	}
	switch r.Meta.Op {
	case change.OpCreate:
		if !cur.Deleted {
			// A CREATE while the key's row is live: a deferred key change;
			// the key has two rows until a delete removes one.
			if !r.Meta.TxIDSet {
				return b.keyChange(r, "a CREATE of a live key without a transaction id (metadata.source.txId)")
			}
			if inCreateTx {
				// The row it joins may itself have joined an older one.
				km.flags |= flagAmbiguous
			}
			b.duals[i] = &dual{tx: r.Meta.TxID, rec: r.Record, shown: change.RenderKey(b.M, cur.Vals), others: []image{{vals: slices.Clone(cur.Vals)}}}
		}
	case change.OpDelete:
		if inCreateTx && !cur.Deleted && b.img != nil && !sameImage(b.M, b.img, cur.Vals) {
			// The key was created in this transaction, and the delete
			// removes a row other than that one: the key had an older row
			// (a swapped or shifted deferrable key); the new row stays.
			km.flags |= flagOlderDeleted
			keepRow(cur, r)
			return nil
		}
		if inCreateTx {
			km.flags |= flagAmbiguous
		}
	default:
		if inCreateTx {
			km.flags |= flagAmbiguous
		}
	}
	set(cur, r)
	return nil
}

// keepRow keeps cur's values and liveness at r's place in the history (a
// delete that removed another physical row of the key).
func keepRow(cur, r *change.Row) {
	cur.Version, cur.Record, cur.Meta = r.Version, r.Record, r.Meta
}

// dualEvent applies r to a key with two live rows.
func (b *Batch) dualEvent(i int32, cur, r *change.Row, d *dual) error {
	if r.Meta.Op != change.OpDelete {
		return b.keyChange(r, fmt.Sprintf("%s while the key has two live rows inside transaction %d: which row it changed is not in the batch", opName(r), d.tx))
	}
	if b.img == nil {
		// A delete of nothing but the key (REPLICA IDENTITY DEFAULT): fine
		// only when every live row is the same.
		for _, o := range d.others {
			if o.vals == nil || !sameImage(b.M, o.vals, cur.Vals) {
				return b.keyChange(r, "a delete with only the key (REPLICA IDENTITY DEFAULT) while the key has two different live rows")
			}
		}
		b.dropOther(i, cur, r, d, 0)
		return nil
	}
	sum := imageSum(b.M, b.img)
	for n, o := range d.others {
		if (o.vals != nil && sameImage(b.M, o.vals, b.img)) || (o.vals == nil && o.sum == sum) {
			b.dropOther(i, cur, r, d, n)
			return nil
		}
	}
	if !sameImage(b.M, cur.Vals, b.img) {
		return b.keyChange(r, "a delete whose before image is none of the key's live rows")
	}
	// The delete removed the newest row: the key is back to another one.
	last := d.others[len(d.others)-1]
	if last.vals == nil {
		return b.keyChange(r, "a delete of the row this key got in the previous batch, leaving a row whose values that batch did not hold")
	}
	copy(cur.Vals, last.vals)
	d.others = d.others[:len(d.others)-1]
	keepRow(cur, r)
	if len(d.others) == 0 {
		delete(b.duals, i)
	}
	return nil
}

// dropOther removes d.others[n] (a delete removed it): the key keeps its row.
func (b *Batch) dropOther(i int32, cur, r *change.Row, d *dual, n int) {
	d.others = slices.Delete(d.others, n, n+1)
	keepRow(cur, r)
	if len(d.others) == 0 {
		delete(b.duals, i)
	}
}

// opName names the event's operation with its article ("an UPDATE").
func opName(r *change.Row) string {
	switch op := r.Meta.Op; {
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
func (b *Batch) truncate(r *change.Row) {
	t := *r
	b.Trunc = &t
	for i := range int32(b.rows.n) {
		cur := b.rows.at(i)
		if cur.Version < r.Version {
			cur.Version, cur.Record, cur.Deleted, cur.Meta = r.Version, r.Record, true, r.Meta
			for c := range b.M.Cols {
				if !b.M.Cols[c].IsKey {
					cur.Vals[c] = change.Zero(b.M.Cols[c].Type)
				}
			}
		}
		b.rows.metaAt(i).flags &^= flagCreate | flagCreateOpen | flagAmbiguous
		delete(b.duals, i)
	}
	for _, s := range b.Seeds {
		s.met = true // its rows are gone
	}
}

// keyChange refuses a key-change shape the batch does not determine.
func (b *Batch) keyChange(r *change.Row, why string) error {
	e := rowError(b.M, r, fmt.Errorf("%w: key %s: %s", change.ErrKeyChange, change.RenderKey(b.M, r.Vals), why))
	return e
}

// sameImage compares two row images by their non-key columns.
func sameImage(m *mapping.Mapping, a, b []change.Value) bool {
	for i := range m.Cols {
		if !m.Cols[i].IsKey && !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}

// imageSum is a stable hash of an image's non-key columns (a row carried
// from one batch to the next by the ledger).
func imageSum(m *mapping.Mapping, vals []change.Value) uint64 {
	h := sha256.New()
	var b [9]byte
	for i := range m.Cols {
		if m.Cols[i].IsKey {
			continue
		}
		v := vals[i]
		binary.LittleEndian.PutUint64(b[:8], v.N)
		b[8] = 0
		if v.Null {
			b[8] = 1
		}
		h.Write(b[:])
		binary.LittleEndian.PutUint64(b[:8], uint64(len(v.S)))
		h.Write(b[:8])
		h.Write([]byte(v.S))
	}
	return binary.LittleEndian.Uint64(h.Sum(nil))
}

// finishKeys ends the batch's key-change tracking: a key that still has two
// live rows is carried to the next batch when the batch ends inside that
// transaction, and resolved to its newest row (Recreated) when the
// transaction ended. So is a key the previous batch left open, unless this
// batch is all of its transaction.
func (b *Batch) finishKeys() []change.OpenKey {
	var open []change.OpenKey
	for i, d := range b.duals {
		r := b.row(i)
		if !b.last.Set || b.last.ID != d.tx {
			b.resolve(i, d)
			continue
		}
		od := change.OpenKey{Key: hex.EncodeToString([]byte(r.Key)), Shown: change.RenderKey(b.M, r.Vals), Tx: d.tx}
		for _, o := range d.others {
			sum := o.sum
			if o.vals != nil {
				sum = imageSum(b.M, o.vals)
			}
			od.Others = append(od.Others, fmt.Sprintf("%016x", sum))
		}
		open = append(open, od)
	}
	for k, s := range b.Seeds {
		if s.met {
			continue
		}
		if !b.first.Set || b.first.ID != s.Tx || !b.last.Set || b.last.ID != s.Tx {
			b.Recreated.add(RecreatedKey{Key: s.shown, Tx: s.Tx})
			continue
		}
		od := change.OpenKey{Key: hex.EncodeToString([]byte(k)), Shown: s.shown, Tx: s.Tx}
		for _, sum := range s.Others {
			od.Others = append(od.Others, fmt.Sprintf("%016x", sum))
		}
		open = append(open, od)
	}
	return open
}

// chunkRows is the number of rows a rowStore allocates at a time.
const chunkRows = 1024

// rowStore holds rows, and their values, in chunks: adding one never
// copies the others, and the store owns the values it holds.
type rowStore struct {
	cols   int // values per row
	chunks [][]change.Row
	vals   [][]change.Value // one slab per chunk, cols values per row
	meta   [][]keyMeta      // per chunk, the batch's bookkeeping of each row's key
	n      int
}

// add copies r, values included, and returns its index; km is its key's
// bookkeeping (metaAt).
func (s *rowStore) add(r *change.Row, km keyMeta) int32 {
	if s.n%chunkRows == 0 {
		s.chunks = append(s.chunks, make([]change.Row, 0, chunkRows))
		s.vals = append(s.vals, make([]change.Value, chunkRows*s.cols))
		s.meta = append(s.meta, make([]keyMeta, 0, chunkRows))
	}
	c := len(s.chunks) - 1
	k := s.n % chunkRows
	vals := s.vals[c][k*s.cols : (k+1)*s.cols : (k+1)*s.cols]
	copy(vals, r.Vals)
	s.chunks[c] = append(s.chunks[c], *r)
	s.chunks[c][k].Vals = vals
	s.meta[c] = append(s.meta[c], km)
	s.n++
	return int32(s.n - 1)
}

func (s *rowStore) at(i int32) *change.Row  { return &s.chunks[i/chunkRows][i%chunkRows] }
func (s *rowStore) metaAt(i int32) *keyMeta { return &s.meta[i/chunkRows][i%chunkRows] }

func (b *Batch) conflict(r *change.Row, other int64) error {
	e := rowError(b.M, r, change.ErrConflict)
	e.Other = other
	return e
}

// rowError locates err at a batch row: its record, key, LSN and version.
func rowError(m *mapping.Mapping, r *change.Row, err error) *change.RecordError {
	e := &change.RecordError{Record: r.Record, Offset: -1, Key: change.RenderKey(m, r.Vals), LSN: r.Meta.LSN, Err: err}
	if e.LSN == 0 {
		e.LSN = r.Version
	}
	if r.Version != e.LSN {
		e.Version = r.Version
	}
	return e
}

// history is the second pass for keys whose events came out of version
// order: it keeps a 64-bit hash of every version of those keys only, and
// refuses two different events at one key and version. A hash collision
// could hide such a conflict with probability 2^-64; equal versions are
// never refused.
type history struct {
	b    *Batch
	ord  change.Orderer
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

// NewHistory returns the check of b's out-of-order keys (history).
func NewHistory(b *Batch) *history { return &history{b: b, seen: map[olderKey]olderVersion{}} }

func (h *history) Reset() { h.seen, h.ord = map[olderKey]olderVersion{}, change.Orderer{} }

func (h *history) Check(r change.Row) error {
	h.b.markerOf(&r)
	h.ord.Stamp(&r)
	if r.Meta.Op == change.OpTruncate {
		return nil
	}
	i, ok := h.b.index[r.Key]
	if !ok || !h.b.OutOfOrder[i] {
		return nil
	}
	k := olderKey{i, r.Version}
	sum := change.HashRow(h.b.seed, &r)
	if v, ok := h.seen[k]; ok {
		if v.hash != sum {
			return h.b.conflict(&r, v.rec)
		}
		return nil
	}
	h.seen[k] = olderVersion{hash: sum, rec: r.Record}
	return nil
}

// Sorted returns the latest rows ordered by key, as the seed writes
// expected.jsonl (for key in sorted(latest)).
func (b *Batch) Sorted() []*change.Row {
	out := make([]*change.Row, b.keys())
	for i := range out {
		out[i] = b.row(int32(i))
	}
	slices.SortFunc(out, func(x, y *change.Row) int { return change.CompareKeys(b.M, x, y) })
	return out
}

// FloorAt places the rows the batch could not floor (the first transaction
// after a snapshot that an earlier batch held) after that snapshot, the
// ledger's snapshot LSN; 0 leaves them at their LSNs.
func (b *Batch) FloorAt(snapshot uint64) {
	if snapshot == 0 {
		return
	}
	up := func(r *change.Row) {
		if r.Meta.Unfloored() {
			r.Meta.Floor, r.Meta.FloorSet = snapshot, true
			r.Version = max(r.Version, change.Raise(r.Meta.LSN, snapshot))
		}
	}
	for i := range int32(b.rows.n) {
		up(b.rows.at(i))
		if km := b.rows.metaAt(i); km.flags&flagFirstUnfloored != 0 {
			km.firstVer = max(km.firstVer, change.Raise(km.firstVer, snapshot))
		}
	}
	if b.Trunc != nil {
		up(b.Trunc)
	}
	if !b.lastFloorSet && b.Events > 0 {
		b.lastFloor, b.lastFloorSet = snapshot, true
	}
}

// CheckKeyChanges finishes the key-change checks once the target's
// versions are read: a key whose first event in the batch is a CREATE
// while the target holds it live (below that CREATE's version) had a
// second row; that is right only when a delete in the same transaction
// removed the old row (the batch saw it: resolved), or when the batch ends
// inside that transaction (the key is carried to the next batch, open).
// It returns the keys left open so far and the carried keys, whose
// target rows (read by the caller) OpenCarried adds.
func (b *Batch) CheckKeyChanges(current map[string]*change.Row) (keyChanges, error) {
	var kc keyChanges
	for i := range int32(b.rows.n) {
		km := *b.rows.metaAt(i)
		if km.flags&flagCreate == 0 {
			continue
		}
		r := b.row(i)
		cur := current[r.Key]
		if cur == nil || cur.Deleted || cur.Version >= km.firstVer || km.flags&flagOlderDeleted != 0 {
			continue
		}
		if b.Trunc != nil && cur.Version < b.Trunc.Version {
			// The key was first met after the batch's TRUNCATE (truncate
			// clears flagCreate), which removed the target's row (a
			// snapshot's end too): the CREATE is of a key no longer live.
			continue
		}
		switch {
		case km.flags&flagCreateOpen != 0 && b.last.Set && b.last.ID == km.createTx:
			kc.Carried = append(kc.Carried, r)
			kc.carriedTx = append(kc.carriedTx, km.createTx)
		case km.flags&flagAmbiguous != 0:
			// The CREATE's transaction changed the key again: which of its
			// two rows that change was of is not in the batch.
			return kc, outcome.Refused.Mark(&change.RecordError{Record: km.createRec, Offset: -1, Key: change.RenderKey(b.M, r.Vals),
				Version: km.firstVer, Err: fmt.Errorf("%w: key %s: transaction %d creates it while the target holds it live (version %d), "+
					"then changes it again: which row that change was of is not in the batch", change.ErrKeyChange, change.RenderKey(b.M, r.Vals), km.createTx, cur.Version)})
		default:
			// The CREATE's transaction ended with both rows live: the
			// target's was removed by a change the batch did not get.
			b.Recreated.add(RecreatedKey{Record: km.createRec, Key: change.RenderKey(b.M, r.Vals), Tx: km.createTx, Version: cur.Version})
		}
	}
	kc.open = b.finishKeys()
	return kc, nil
}

// keyChanges is what CheckKeyChanges found: the keys left open, and the
// keys carried to the next batch with their transactions.
type keyChanges struct {
	open      []change.OpenKey
	Carried   []*change.Row
	carriedTx []int64
}

// OpenCarried adds the carried keys to the open ones, each with the hash
// of its older row, old (the target's rows of the carried keys), and
// returns them all in key order.
func (b *Batch) OpenCarried(kc keyChanges, old map[string]*change.Row) ([]change.OpenKey, error) {
	m := b.M
	open := kc.open
	for n, r := range kc.Carried {
		o := old[r.Key]
		if o == nil {
			return nil, outcome.Refused.Mark(b.keyChange(r, "the target's row of this key vanished while the batch ran (another writer?)"))
		}
		open = append(open, change.OpenKey{Key: hex.EncodeToString([]byte(r.Key)), Shown: change.RenderKey(m, r.Vals), Tx: kc.carriedTx[n],
			Others: []string{fmt.Sprintf("%016x", imageSum(m, o.Vals))}})
	}
	// In key order, so that the ledger's open_keys of a batch is the same
	// text on every run.
	slices.SortFunc(open, func(a, b change.OpenKey) int { return strings.Compare(a.Key, b.Key) })
	return open, nil
}

// Entry is the ledger row of this batch, applied after prev.
func (b *Batch) Entry(holder string, src change.SourceID, expected []*change.Row, pending int, open []change.OpenKey, prev *change.LedgerEntry) *change.LedgerEntry {
	e := &change.LedgerEntry{Kind: change.LedgerBatch, Digest: b.Digest(), Holder: holder, Source: src, Events: uint64(b.Events), Keys: uint64(len(expected)),
		Pending: uint64(pending), OpenKeys: open, SnapshotLSN: b.ord.Snapshot,
		LastTx: b.last.ID, LastTxSet: b.last.Set, LastFloor: b.lastFloor}
	for n, r := range expected {
		if n == 0 || r.Version < e.MinVersion {
			e.MinVersion = r.Version
		}
		e.MaxVersion = max(e.MaxVersion, r.Version)
	}
	if b.Trunc != nil {
		e.MaxVersion = max(e.MaxVersion, b.Trunc.Version)
		if len(expected) == 0 {
			e.MinVersion = b.Trunc.Version
		}
	}
	e.HighVersion = e.MaxVersion
	if prev != nil {
		e.HighVersion = max(e.HighVersion, prev.HighVersion)
		e.SnapshotLSN = max(e.SnapshotLSN, prev.SnapshotLSN)
	}
	return e
}
