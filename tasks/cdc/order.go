package cdc

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

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

// raise returns max(lsn, floor+1): a change written before its
// transaction's commit floor is placed just after it.
func raise(lsn, floor uint64) uint64 {
	if floor == math.MaxUint64 || lsn > floor {
		return lsn
	}
	return floor + 1
}

// orderer stamps rows with their version in file order: it knows the
// latest snapshot LSN seen so far (READ rows), which is the floor of the
// first transaction after a snapshot (whose sequence has no lsn_commit).
type orderer struct {
	snapshot uint64 // the highest READ LSN seen in this batch; 0 when none
}

// stamp sets r.lsn (the version) from what the event said (r.change). A
// snapshot row (READ without lsn_commit) is at its LSN and moves the
// batch's snapshot point. A streamed row is raised to its floor: its
// lsn_commit, or else the snapshot earlier in the batch; without either it
// keeps its LSN and stays unfloored (the target's ledger may know the
// snapshot it follows: batch.floorAt).
func (o *orderer) stamp(r *row) {
	c := &r.change
	r.lsn = c.lsn
	switch {
	case c.snapshotRow():
		o.snapshot = max(o.snapshot, c.lsn)
		return
	case c.commitSet:
		c.floor, c.floorSet = c.commit, true
	case o.snapshot > 0:
		c.floor, c.floorSet = o.snapshot, true
	default:
		return
	}
	r.lsn = raise(c.lsn, c.floor)
}

// snapshotRow reports a row of an initial snapshot: a READ without
// lsn_commit (Debezium's snapshot rows carry [null, lsn]).
func (c *change) snapshotRow() bool { return c.operation == opRead && !c.commitSet }

// unfloored reports a streamed row whose floor is not known from the
// batch: the first transaction after a snapshot in an earlier batch, or a
// batch without sequences.
func (c *change) unfloored() bool { return !c.floorSet && !c.snapshotRow() }

// isFloor reports a row placed at its transaction's floor (its change was
// written before the commit floor): such rows of one transaction share a
// version, and among them the later one in the stream is the later change.
func isFloor(r *row) bool {
	return r.change.floorSet && r.change.floor < math.MaxUint64 && r.lsn == r.change.floor+1 && r.change.lsn <= r.change.floor
}

// floorTie reports two different rows of one key at one version that are
// both changes of one transaction written before its commit floor: r, the
// later one in the stream, is the later change.
func floorTie(r, earlier *row) bool {
	return r.change.txIDSet && earlier.change.txIDSet && r.change.txID == earlier.change.txID &&
		isFloor(r) && isFloor(earlier) && r.change.floor == earlier.change.floor
}

// checkSequence refuses a sequence whose own LSN is not the event's
// source.lsn (Debezium writes [lsn_commit, lsn]).
func checkSequence(seq []byte, lsn, commit uint64, commitSet bool, seqLSN uint64, seqLSNSet bool) error {
	if seqLSNSet && seqLSN != lsn {
		return fmt.Errorf("%w: metadata.source.sequence %s names LSN %d, but metadata.source.lsn is %d (Debezium writes [lsn_commit, lsn]); replay the batch the trigger wrote",
			ErrContradiction, seq, seqLSN, lsn)
	}
	if commitSet && commit == math.MaxUint64 {
		return fmt.Errorf("%w: metadata.source.sequence %s: lsn_commit is outside 0..2^64-2", ErrContradiction, seq)
	}
	return nil
}

// eventSum hashes what identifies an event (its LSN, lsn_commit,
// transaction, operation, markers and values, the key's and a delete's
// before image included) with xxHash64, in the decoding workers; buf is
// the worker's scratch. The batch folds the sums in file order into its
// digest (batch.digest).
func eventSum(buf []byte, r *row) (uint64, []byte) {
	c := &r.change
	p := binary.LittleEndian.AppendUint64(buf[:0], c.lsn)
	p = binary.LittleEndian.AppendUint64(p, c.commit)
	p = binary.LittleEndian.AppendUint64(p, uint64(c.txID))
	flags := byte(0)
	for i, b := range []bool{c.commitSet, c.txIDSet, r.deleted, c.deletedSet, c.image} {
		if b {
			flags |= 1 << i
		}
	}
	p = append(p, flags)
	p = binary.AppendUvarint(p, uint64(len(c.operation)))
	p = append(p, c.operation...)
	for _, v := range r.vals {
		p = binary.LittleEndian.AppendUint64(p, v.n)
		var f byte
		if v.null {
			f |= 1
		}
		if v.toast {
			f |= 2
		}
		p = append(p, f)
		p = binary.AppendUvarint(p, uint64(len(v.s)))
		p = append(p, v.s...)
	}
	return xxhash.Sum64(p), p
}
