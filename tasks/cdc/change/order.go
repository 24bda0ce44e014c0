package change

import (
	"encoding/binary"
	"math"

	"github.com/cespare/xxhash/v2"
)

// The version of a change: a number that follows PostgreSQL's commit order
// (docs/cdc.md, "Versions"). A streamed change of transaction T is at
//
//	version = max(change LSN, F_T + 1)
//
// where F_T is the commit floor: the first element of metadata.source.sequence
// (Debezium's lsn_commit, the end of the last COMMIT the connector processed
// before T), or, when it is null (T is the first transaction after a
// snapshot), the snapshot's LSN. A snapshot READ row is at its LSN (the
// snapshot's point). Every version of T lies in (F_T, commit(T)), and F of
// the next transaction is at least commit(T), so versions increase with
// commit order across transactions, and with change order inside one
// (except changes written before F_T, which share F_T + 1).

// Raise returns max(lsn, floor+1): a change written before its
// transaction's commit floor is placed just after it.
func Raise(lsn, floor uint64) uint64 {
	if floor == math.MaxUint64 || lsn > floor {
		return lsn
	}
	return floor + 1
}

// Orderer stamps rows with their version in file order: it knows the
// latest snapshot LSN seen so far (READ rows), which is the floor of the
// first transaction after a snapshot (whose sequence has no lsn_commit).
type Orderer struct {
	Snapshot uint64 // the highest READ LSN seen in this batch; 0 when none
}

// Stamp sets r.Version from what the event said (r.Meta). A
// snapshot row (READ without lsn_commit) is at its LSN and moves the
// batch's snapshot point. A streamed row is raised to its floor: its
// lsn_commit, or else the snapshot earlier in the batch; without either it
// keeps its LSN and stays unfloored (the target's ledger may know the
// snapshot it follows: merge.Batch.FloorAt).
func (o *Orderer) Stamp(r *Row) {
	c := &r.Meta
	r.Version = c.LSN
	switch {
	case c.snapshotRow():
		o.Snapshot = max(o.Snapshot, c.LSN)
		return
	case c.CommitSet:
		c.Floor, c.FloorSet = c.Commit, true
	case o.Snapshot > 0:
		c.Floor, c.FloorSet = o.Snapshot, true
	default:
		return
	}
	r.Version = Raise(c.LSN, c.Floor)
}

// snapshotRow reports a row of an initial snapshot: a READ without
// lsn_commit (Debezium's snapshot rows carry [null, lsn]).
func (c *Meta) snapshotRow() bool { return c.Op == OpRead && !c.CommitSet }

// SnapshotEnd reports the last row of a snapshot of the table (Debezium's
// "last", or "last_in_data_collection" when other tables follow): every
// row the table held at the snapshot's point has been read by then.
func (c *Meta) SnapshotEnd() bool {
	return c.snapshotRow() && (c.Snapshot == "last" || c.Snapshot == "last_in_data_collection")
}

// Unfloored reports a streamed row whose floor is not known from the
// batch: the first transaction after a snapshot in an earlier batch, or a
// batch without sequences.
func (c *Meta) Unfloored() bool { return !c.FloorSet && !c.snapshotRow() }

// IsFloor reports a row placed at its transaction's floor (its change was
// written before the commit floor): such rows of one transaction share a
// version, and among them the later one in the stream is the later change.
func IsFloor(r *Row) bool {
	return r.Meta.FloorSet && r.Meta.Floor < math.MaxUint64 && r.Version == r.Meta.Floor+1 && r.Meta.LSN <= r.Meta.Floor
}

// FloorTie reports two different rows of one key at one version that are
// both changes of one transaction written before its commit floor: r, the
// later one in the stream, is the later change.
func FloorTie(r, earlier *Row) bool {
	return r.Meta.TxIDSet && earlier.Meta.TxIDSet && r.Meta.TxID == earlier.Meta.TxID &&
		IsFloor(r) && IsFloor(earlier) && r.Meta.Floor == earlier.Meta.Floor
}

// EventSum hashes what identifies an event (its LSN, lsn_commit,
// transaction, operation, markers and values, the key's and a delete's
// before image included) with xxHash64, in the decoding workers; buf is
// the worker's scratch. The batch folds the sums in file order into its
// digest (batch.digest).
func EventSum(buf []byte, r *Row) (uint64, []byte) {
	c := &r.Meta
	p := binary.LittleEndian.AppendUint64(buf[:0], c.LSN)
	p = binary.LittleEndian.AppendUint64(p, c.Commit)
	p = binary.LittleEndian.AppendUint64(p, uint64(c.TxID))
	flags := byte(0)
	for i, b := range []bool{c.CommitSet, c.TxIDSet, r.Deleted, c.DeletedSet, c.Image} {
		if b {
			flags |= 1 << i
		}
	}
	p = append(p, flags)
	p = binary.AppendUvarint(p, uint64(len(c.Op)))
	p = append(p, c.Op...)
	for _, v := range r.Vals {
		p = binary.LittleEndian.AppendUint64(p, v.N)
		var f byte
		if v.Null {
			f |= 1
		}
		if v.Toast {
			f |= 2
		}
		p = append(p, f)
		p = binary.AppendUvarint(p, uint64(len(v.S)))
		p = append(p, v.S...)
	}
	return xxhash.Sum64(p), p
}
