package target

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"

	"github.com/changesink/changesink/internal/outcome"
)

// The ledger is a small MergeTree table next to the target,
// <table>_ledger, with one row per applied batch (and one baseline row for
// a target that held rows before the ledger existed). It is read and
// written under the target's lock (lock.go). It answers three questions:
//
//   - Was this batch applied before? (digest: a replay, skipped and
//     verified as before.)
//   - Is a batch that was never applied newer than what the target holds?
//     (high_version, last_tx, last_floor: else ErrWentBackwards.)
//   - What does the next batch need from this one? (snapshot_lsn: the floor
//     of the first transaction after a snapshot; open_keys: keys left with
//     two live rows inside a transaction that continues.)
//
// It also records the source's identity as the batches show it
// (metadata.source connector, name, version, db), which the refusals name.

// ledgerColumns are the ledger's columns and their ClickHouse types, in
// table order.
var ledgerColumns = [][2]string{
	{"seq", "UInt64"}, // 1, 2, ... in apply order
	{"kind", "String"},
	{"digest", "String"},
	{"applied_at", "DateTime"},
	{"holder", "String"},
	{"events", "UInt64"},
	{"keys", "UInt64"},
	{"pending", "UInt64"},
	{"min_version", "UInt64"},
	{"max_version", "UInt64"},
	{"high_version", "UInt64"},
	{"snapshot_lsn", "UInt64"},
	{"last_tx", "Int64"},
	{"last_tx_set", "UInt8"},
	{"last_floor", "UInt64"},
	{"open_keys", "String"},
	{"source_connector", "String"},
	{"source_name", "String"},
	{"source_version", "String"},
	{"source_db", "String"},
}

// targetLedger is the ledger of m's target, on s (nil: for its SQL only).
func targetLedger(s *Server, m *mapping.Mapping) *ledgerTable {
	return &ledgerTable{s: s, db: m.Target.Database, table: mapping.LedgerName(m), what: "ledger", cols: ledgerColumns,
		stamp: "applied_at", orderBy: "seq", onCluster: true, keepDropped: true}
}

// ledger is the ledger of t's target.
func (t *Server) ledger() *ledgerTable { return targetLedger(t, t.M) }

// createLedgerSQL makes the ledger (setup, and apply on a target the seed
// flow made).
func createLedgerSQL(m *mapping.Mapping) string { return targetLedger(nil, m).createSQL() }

// readLedger reads the latest row and the row of digest, if any.
func (t *Table) readLedger(ctx context.Context, digest string) (change.LedgerState, error) {
	var st change.LedgerState
	cctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	l := t.ledger()
	name := l.name()
	read := func(where string, args ...any) (*change.LedgerEntry, error) {
		var e *change.LedgerEntry
		var x change.LedgerEntry
		var lastTxSet uint8
		var open string
		err := l.read(cctx, l.columnList(true), where, args, []any{&x.Seq, &x.Kind, &x.Digest, &x.AppliedAt, &x.Holder, &x.Events,
			&x.Keys, &x.Pending, &x.MinVersion, &x.MaxVersion, &x.HighVersion, &x.SnapshotLSN, &x.LastTx, &lastTxSet, &x.LastFloor, &open,
			&x.Source.Connector, &x.Source.Name, &x.Source.Version, &x.Source.Db}, func() error {
			y := x
			y.LastTxSet = lastTxSet != 0
			if open != "" {
				if err := json.Unmarshal([]byte(open), &y.OpenKeys); err != nil {
					return outcome.Refused.Mark(fmt.Errorf("%w: the ledger %s row %d has malformed open_keys (%v)",
						change.ErrTargetRowUnreadable, name, y.Seq, err))
				}
			}
			e = &y
			return nil
		})
		return e, err
	}
	var err error
	if st.Last, err = read("ORDER BY seq DESC LIMIT 1"); err != nil {
		return st, err
	}
	if st.Last != nil {
		if err := t.checkSeqs(cctx, name); err != nil {
			return st, err
		}
	}
	if st.Last != nil && digest != "" {
		if st.Replay, err = read("WHERE digest = ? AND kind = ? ORDER BY seq LIMIT 1", digest, change.LedgerBatch); err != nil {
			return st, err
		}
		if st.Replay != nil && st.Replay.Seq > 1 {
			if st.BeforeReplay, err = read("WHERE seq = ? LIMIT 1", st.Replay.Seq-1); err != nil {
				return st, err
			}
		}
	}
	return st, nil
}

// checkSeqs refuses a ledger with two rows of one seq that record
// different batches (ErrLedgerSeq), naming their holders and times. Two
// rows of one seq recording one batch (kind and digest) are one record
// written twice: a run whose quorum insert of it failed with
// UNKNOWN_STATUS_OF_INSERT, re-run through a replica that did not hold it
// yet, recorded it again; both say the same thing.
func (t *Table) checkSeqs(ctx context.Context, name string) error {
	var seq, n uint64
	var holders []string
	var times []time.Time
	err := t.conn.QueryRow(ctx, "SELECT seq, count(), groupArray(holder), groupArray(applied_at) FROM "+name+
		" GROUP BY seq HAVING uniqExact(kind, digest) > 1 ORDER BY seq LIMIT 1").Scan(&seq, &n, &holders, &times)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return classify(fmt.Errorf("read the ledger %s: %w", name, err))
	}
	shown := make([]string, len(holders))
	for i := range holders {
		shown[i] = fmt.Sprintf("holder %s at %s", holders[i], times[i].UTC().Format(time.RFC3339))
	}
	return outcome.Refused.Mark(fmt.Errorf("%w: %s has %d rows of seq %d (%s)", ErrLedgerSeq, name, n, seq, strings.Join(shown, ", ")))
}

// appendLedger writes one ledger row (seq: the last one's plus one),
// fenced by f: the row's values are literals of an INSERT … SELECT from
// the lock table, which yields the row only while the lock is f's holder's
// (fence.go).
func (t *Table) appendLedger(ctx context.Context, prev *change.LedgerEntry, e *change.LedgerEntry, f Fence) error {
	e.Seq = 1
	if prev != nil {
		e.Seq = prev.Seq + 1
	}
	open := ""
	if len(e.OpenKeys) > 0 {
		b, err := json.Marshal(e.OpenKeys)
		if err != nil {
			return err
		}
		open = string(b)
	}
	return t.ledger().append(ctx, []any{e.Seq, e.Kind, e.Digest, e.Holder, e.Events, e.Keys, e.Pending, e.MinVersion, e.MaxVersion,
		e.HighVersion, e.SnapshotLSN, e.LastTx, uint8(boolByte(e.LastTxSet)), e.LastFloor, open,
		e.Source.Connector, e.Source.Name, e.Source.Version, e.Source.Db}, f, fmt.Sprintf("the ledger row of seq %d", e.Seq))
}

// RecordBatch appends the ledger row of a batch applied and verified after
// prev. A ledger dropped during the run is transient: apply makes the
// ledger itself (EnsureLedger), so a re-run records the batch.
func (t *Table) RecordBatch(ctx context.Context, prev, e *change.LedgerEntry, f Fence) error {
	err := t.retryQuorum(ctx, func() error { return t.appendLedger(ctx, prev, e, f) }, t.ledgerSettled(ctx, prev, e))
	if err != nil && chCode(err) == chUnknownTable {
		// Not a setup to run, and the batch's rows are in (the exit-3 case).
		return outcome.Transient.Mark(fmt.Errorf("%w: %s: %w", ErrLedgerDropped, mapping.Qualified(t.M.Target.Database, mapping.LedgerName(t.M)), err))
	}
	return err
}

// EnsureLedger reads the ledger's latest row and the row of digest
// (readLedger), creating the ledger first when it is missing (a target the
// seed flow made, or one set up before the ledger existed) and checking
// its columns when it cannot be read; a new ledger over a target that
// holds rows gets a baseline row: the target's highest version, so that an
// older batch is still told from a new one. A ledger with rows is read in
// one pass. It runs under the lock.
func (t *Table) EnsureLedger(ctx context.Context, f Fence, digest string) (change.LedgerState, error) {
	st, err := t.readLedger(ctx, digest)
	if err == nil && st.Last != nil {
		return st, nil
	}
	cctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	if err != nil && chCode(err) != chUnknownTable {
		// Say which column is wrong, when that is why it cannot be read;
		// after a timeout or a lost connection, asking again would only
		// wait out another timeout.
		if outcome.Classify(err) == outcome.Transient {
			return st, err
		}
		if cerr := t.checkLedger(cctx); cerr != nil {
			return st, cerr
		}
		return st, err
	}
	m := t.M
	if err != nil && t.cl != nil {
		// Setup made it on every replica; gone from the one read here (a
		// replica whose ledger was dropped since CheckReplicaObjects):
		// made again here, it would be a new, empty replica of the
		// existing path, over which the baseline row below would be a
		// second row of seq 1. cdc setup makes it again and checks.
		return st, outcome.Config.Mark(fmt.Errorf("%w: %s is missing on a replica of cluster %s: %w", ErrReplicaLacks,
			mapping.Qualified(m.Target.Database, mapping.LedgerName(m)), t.cl.name, err))
	}
	if err := t.ledger().ensure(cctx); err != nil {
		return st, err
	}
	var high uint64
	var n uint64
	name := mapping.Qualified(m.Target.Database, m.Target.Table)
	if err := t.conn.QueryRow(cctx, "SELECT count(), max("+mapping.QuoteIdent(m.Target.VersionColumn)+") FROM "+name).Scan(&n, &high); err != nil {
		return st, classify(fmt.Errorf("read the highest version of %s: %w", name, err))
	}
	if n > 0 {
		if err := t.appendLedger(ctx, nil, &change.LedgerEntry{Kind: change.LedgerBaseline, Holder: f.holder, Keys: n, MaxVersion: high, HighVersion: high}, f); err != nil {
			return st, err
		}
	}
	return t.readLedger(ctx, digest)
}

// checkOrphanLedger refuses to set up a target table that does not exist
// while its ledger holds rows: the table was dropped by hand (or lost), and
// a new empty one would lack the rows of every batch the ledger records as
// applied; later batches would then apply over it and the live view would
// silently miss every key they do not touch.
func (t *Server) checkOrphanLedger(ctx context.Context) error {
	m := t.M
	cctx, cancel := context.WithTimeout(ctx, t.timeout)
	_, found, err := t.describe(cctx, m.Target.Database, m.Target.Table)
	cancel()
	if err != nil || found {
		return err
	}
	st, err := (&Table{Server: t}).readLedger(ctx, "")
	switch {
	case chCode(err) == chUnknownTable || chCode(err) == chUnknownDatabase:
		return nil
	case err != nil:
		return err
	case st.Last == nil:
		return nil
	}
	tbl, ledger := mapping.Qualified(m.Target.Database, m.Target.Table), mapping.Qualified(m.Target.Database, mapping.LedgerName(m))
	return outcome.Config.Mark(fmt.Errorf("%w: table %s does not exist, but its ledger %s records applied batches (its last row is %s)",
		change.ErrOrphanLedger, tbl, ledger, change.DescribeEntry(ledger, st.Last)))
}

// checkLedger refuses a ledger table whose columns are not the ledger's.
func (t *Server) checkLedger(ctx context.Context) error { return t.ledger().check(ctx) }
