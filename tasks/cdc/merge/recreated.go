package merge

import (
	"cmp"
	"slices"
)

// A transaction can leave a key with two live rows in the batch's view:
// a CREATE of a key whose row is live, and no delete of either row before
// the transaction ends. A primary key allows that only inside a
// transaction (a deferred key change), so at its end one row was removed
// by a change the batch never got: a DELETE or, with the trigger's
// default skipped.operations=t, a TRUNCATE. The CREATE's row is the live
// one; the batch applies it as the upsert it is, and reports the key
// (Recreated) so that the operator learns of the missing change.

// Recreated is the keys a transaction created while they were live and
// left so: applied as upserts of the CREATE's row.
type Recreated struct {
	Keys int64
	// First is the first few of them (by record), for the log.
	First []RecreatedKey
}

// RecreatedKey is one key created again: its CREATE's record in the batch
// (0: the previous batch held it), the key, its transaction and the
// version of the row it replaced (0: the batch's own row).
type RecreatedKey struct {
	Record  int64
	Key     string
	Tx      int64
	Version uint64
}

// recreatedShown is how many keys Recreated.First keeps.
const recreatedShown = 5

func (r *Recreated) add(k RecreatedKey) {
	r.Keys++
	at, _ := slices.BinarySearchFunc(r.First, k, func(a, b RecreatedKey) int {
		return cmp.Or(cmp.Compare(a.Record, b.Record), cmp.Compare(a.Key, b.Key))
	})
	if at < recreatedShown {
		r.First = slices.Insert(r.First, at, k)
		r.First = r.First[:min(len(r.First), recreatedShown)]
	}
}

// resolve ends key i's two live rows, d, when their transaction ended
// without a delete of one: the batch's row (the newest, the CREATE's)
// stays the key's.
func (b *Batch) resolve(i int32, d *dual) {
	delete(b.duals, i)
	b.Recreated.add(RecreatedKey{Record: d.rec, Key: d.shown, Tx: d.tx})
}
