package target

import (
	"context"
	"fmt"
	"time"
)

// The sync ledger, <db>._changesink_sync, records how far cdc sync has
// applied the stream of each replication slot: one row per flush, written
// once every target's read-back passed and before the slot is confirmed.
// A run starts from the slot's confirmed position, and the ledger tells
// what that position means:
//
//   - the slot at the ledger's position: the last run ended cleanly;
//   - the slot behind it: the last confirm was lost (a run killed between
//     its ledger row and its confirm, or a PostgreSQL restart before the
//     slot's position was saved), and what comes again is a replay, which
//     the targets' versions skip;
//   - the slot ahead of it: something else confirmed changes sync never
//     applied (another consumer of the slot): a gap, refused
//     (change.ErrSlotAhead).
//
// The source's identity (the PostgreSQL system identifier and the slot's
// database) is recorded with each row, so a slot of the same name on
// another server (a restore, a migration) is refused too.

// syncLedgerName is the sync ledger's table name.
const syncLedgerName = "_changesink_sync"

// syncLedgerColumns are the sync ledger's columns, in table order.
var syncLedgerColumns = [][2]string{
	{"slot", "String"},
	{"seq", "UInt64"}, // 1, 2, ... per slot
	{"applied_at", "DateTime"},
	{"holder", "String"},
	{"system_id", "String"},
	{"source_db", "String"},
	{"through_lsn", "UInt64"}, // every transaction committed at or before it is applied
	{"transactions", "UInt64"},
	{"changes", "UInt64"},
	{"tables", "String"}, // the tables of the flush and their counts, as JSON
}

// SyncEntry is one row of the sync ledger.
type SyncEntry struct {
	Slot      string
	Seq       uint64
	AppliedAt time.Time
	Holder    string
	// SystemID and SourceDB identify the source: PostgreSQL's system
	// identifier (IDENTIFY_SYSTEM) and the slot's database.
	SystemID, SourceDB string
	// Through is the stream position the flush applied: every transaction
	// whose commit ends at or before it.
	Through               uint64
	Transactions, Changes uint64
	Tables                string
}

// SyncLedger is the sync ledger of one database.
type SyncLedger struct {
	l *ledgerTable
}

// SyncLedger returns the sync ledger in database db.
func (t *Server) SyncLedger(db string) *SyncLedger {
	return &SyncLedger{l: &ledgerTable{s: t, db: db, table: syncLedgerName, what: "sync ledger", cols: syncLedgerColumns,
		stamp: "applied_at", orderBy: "(slot, seq)"}}
}

// Ensure creates the ledger when it is missing and checks its columns.
func (l *SyncLedger) Ensure(ctx context.Context) error { return l.l.ensure(ctx) }

// Last returns the slot's latest row; nil when the ledger has none.
func (l *SyncLedger) Last(ctx context.Context, slot string) (*SyncEntry, error) {
	cctx, cancel := context.WithTimeout(ctx, l.l.s.timeout)
	defer cancel()
	var e *SyncEntry
	var x SyncEntry
	err := l.l.read(cctx, l.l.columnList(true), "WHERE slot = ? ORDER BY seq DESC LIMIT 1", []any{slot},
		[]any{&x.Slot, &x.Seq, &x.AppliedAt, &x.Holder, &x.SystemID, &x.SourceDB, &x.Through, &x.Transactions, &x.Changes, &x.Tables},
		func() error {
			y := x
			e = &y
			return nil
		})
	if err != nil {
		return nil, err
	}
	return e, nil
}

// Append writes e after prev (nil: the slot's first row), numbering it,
// fenced by f (fence.go): the holder checks its lock after it.
func (l *SyncLedger) Append(ctx context.Context, prev, e *SyncEntry, f Fence) error {
	e.Seq = 1
	if prev != nil {
		e.Seq = prev.Seq + 1
	}
	return l.l.append(ctx, []any{e.Slot, e.Seq, e.Holder, e.SystemID, e.SourceDB, e.Through, e.Transactions, e.Changes, e.Tables},
		f, fmt.Sprintf("the sync ledger row of seq %d", e.Seq))
}
