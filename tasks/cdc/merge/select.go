package merge

import (
	"fmt"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"

	"github.com/changesink/changesink/internal/outcome"
)

// Selection is what SelectPending decided.
type Selection struct {
	Pending []*change.Row
	Deletes int64
	// newer counts keys the target holds at a lower version, older keys it
	// holds at a higher one, same exact replays; keys it lacks count in none.
	newer, older, same, absent int
	firstOlder                 *change.Row
	firstOlderTarget           uint64
	// unplaced is the first older key whose version could not be placed
	// after its snapshot (UnplacedAfter), and the target's version of it.
	unplaced       *change.Row
	unplacedTarget uint64
}

// SelectPending implements the seed's select_changes: a key is pending when
// the target lacks it or holds an older version; an equal version with a
// different payload is refused (ErrTargetConflict), except a later change
// of the transaction the previous batch ended in, at that transaction's
// floor (order.go: both share a version, the later insert wins); an equal
// one is a replay.
func SelectPending(m *mapping.Mapping, expected []*change.Row, current map[string]*change.Row, prev *change.LedgerEntry) (Selection, error) {
	var sel Selection
	for _, r := range expected {
		cur := current[r.Key]
		switch {
		case cur == nil:
			sel.absent++
		case cur.Version < r.Version:
			sel.newer++
		case cur.Version == r.Version && change.SamePayload(cur, r):
			sel.same++
			continue
		case cur.Version == r.Version && continuesFloor(r, prev):
			sel.newer++
		case cur.Version == r.Version:
			return sel, outcome.Refused.Mark(rowError(m, r, change.ErrTargetConflict))
		default:
			sel.older++
			if sel.firstOlder == nil {
				sel.firstOlder, sel.firstOlderTarget = r, cur.Version
			}
			// Only a change that carries a sequence without lsn_commit: a
			// batch without sequences (hand-made) is versioned by its
			// LSNs, and an older key is skipped, as the seed does.
			if sel.unplaced == nil && prev != nil && prev.Kind == change.LedgerBaseline && r.Meta.Unfloored() && r.Meta.Sequenced {
				sel.unplaced, sel.unplacedTarget = r, cur.Version
			}
			continue
		}
		sel.Pending = append(sel.Pending, r)
		if r.Deleted {
			sel.Deletes++
		}
	}
	return sel, nil
}

// continuesFloor reports a row at its transaction's floor in the
// transaction the previous batch ended in: the target's row at that
// version is an earlier change of the same transaction.
func continuesFloor(r *change.Row, prev *change.LedgerEntry) bool {
	return prev != nil && prev.LastTxSet && r.Meta.TxIDSet && r.Meta.TxID == prev.LastTx &&
		change.IsFloor(r) && r.Meta.Floor == prev.LastFloor
}

// WentBackwards refuses a batch that was never applied when no key of it
// can be placed: every key is older than the target's (none newer, none an
// exact replay of a row the target holds, none new to it). Then the
// versions of the source no longer follow the target's (a restore, a
// migration, a failover with other LSNs), or an old batch was replayed
// after newer ones, and skipping it as "older" would lose its changes
// silently. A key the target holds at the batch's very version and payload
// shows the batch belongs to the history the target has (part of an
// applied batch replayed); a key the target lacks is applied (a batch that
// failed and is replayed after a newer one must still create the keys only
// it holds). Either way its older keys were superseded, and are skipped.
func WentBackwards(m *mapping.Mapping, b *Batch, src change.SourceID, sel Selection, led change.LedgerState) error {
	if sel.newer > 0 || sel.same > 0 || sel.absent > 0 || sel.older == 0 {
		return nil
	}
	r := sel.firstOlder
	ledger := mapping.Qualified(m.Target.Database, mapping.LedgerName(m))
	last := "the ledger " + ledger + " is empty"
	if led.Last != nil {
		last = "the ledger's last row is " + change.DescribeEntry(ledger, led.Last)
	}
	e := rowError(m, r, fmt.Errorf("%w %s holds version %d of this key; all %d keys of the batch are older than the target's; "+
		"batch %s from %s, never applied; %s", change.ErrWentBackwards, mapping.Qualified(m.Target.Database, m.Target.Table),
		sel.firstOlderTarget, sel.older, b.Digest()[:16], src.Describe(), last))
	return outcome.Refused.Mark(e)
}

// UnplacedAfter refuses a batch that was never applied with a key older
// than the target whose change has no lsn_commit (the first transaction
// after a snapshot) when neither the batch nor the ledger knows that
// snapshot: the ledger's last row is a baseline (made over rows already in
// the target: a target the seed flow filled, or a ledger dropped by hand).
// Its version may belong after the snapshot's rows (docs/cdc.md, "Versions"),
// so skipping it as older could lose it.
func UnplacedAfter(m *mapping.Mapping, sel Selection) error {
	if sel.unplaced == nil {
		return nil
	}
	ledger := mapping.Qualified(m.Target.Database, mapping.LedgerName(m))
	e := rowError(m, sel.unplaced, fmt.Errorf("%w: %s holds version %d of this key, above the change's LSN; the change has no lsn_commit "+
		"and the ledger %s (a baseline) knows no snapshot to place it after", change.ErrUnplaced, mapping.Qualified(m.Target.Database, m.Target.Table),
		sel.unplacedTarget, ledger))
	return outcome.Refused.Mark(e)
}

// CompareReadBack checks each expected row against the read-back: the
// key must hold this exact version, or a newer one.
func CompareReadBack(m *mapping.Mapping, expected []*change.Row, actual map[string]*change.Row) (int64, error) {
	var verified int64
	for _, want := range expected {
		got := actual[want.Key]
		var why string
		switch {
		case got == nil:
			why = "the captured key is missing from ClickHouse"
		case got.Version < want.Version:
			why = fmt.Sprintf("ClickHouse holds the older version %d", got.Version)
		case got.Version == want.Version && !change.SamePayload(got, want):
			why = "ClickHouse holds a different payload at this version"
		}
		if why != "" {
			return verified, outcome.Refused.Mark(rowError(m, want, fmt.Errorf("%w: %s", change.ErrVerify, why)))
		}
		verified++
	}
	return verified, nil
}
