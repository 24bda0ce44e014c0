package cdc

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/amazon-ion/ion-go/ion"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/internal/batchfile"
	"github.com/changesink/changesink/tasks/cdc/internal/ionesc"
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

// Ledger row kinds.
const (
	ledgerBatch    = "batch"
	ledgerBaseline = "baseline"
)

// ledgerName is the ledger table's name.
func ledgerName(m *Mapping) string { return m.Target.Table + "_ledger" }

// createLedgerSQL makes the ledger (setup, and apply on a target the seed
// flow made).
func createLedgerSQL(m *Mapping) string {
	var b strings.Builder
	b.WriteString("CREATE TABLE IF NOT EXISTS " + qualified(m.Target.Database, ledgerName(m)) + " (\n")
	for i, c := range ledgerColumns {
		b.WriteString("  " + c[0] + " " + c[1])
		if c[0] == "applied_at" {
			b.WriteString(" DEFAULT now()")
		}
		if i < len(ledgerColumns)-1 {
			b.WriteString(",")
		}
		b.WriteString("\n")
	}
	b.WriteString(") ENGINE = MergeTree ORDER BY seq")
	return b.String()
}

func ledgerColumnList(withTime bool) string {
	names := make([]string, 0, len(ledgerColumns))
	for _, c := range ledgerColumns {
		if c[0] == "applied_at" && !withTime {
			continue
		}
		names = append(names, c[0])
	}
	return strings.Join(names, ", ")
}

// ledgerEntry is one ledger row.
type ledgerEntry struct {
	seq                  uint64
	kind, digest, holder string
	appliedAt            time.Time
	events, keys         uint64
	pending              uint64
	minVersion           uint64
	maxVersion           uint64
	highVersion          uint64
	snapshotLSN          uint64
	lastTx               int64
	lastTxSet            bool
	lastFloor            uint64
	openKeys             []openDual
	source               sourceID
}

// ledgerState is what apply reads from the ledger under the lock.
type ledgerState struct {
	last   *ledgerEntry // the latest row; nil when the ledger is empty
	replay *ledgerEntry // the row of an earlier apply of this batch's digest
	// beforeReplay is the row before replay (nil: none): what that apply
	// followed (its snapshot LSN, its open keys).
	beforeReplay *ledgerEntry
}

// readLedger reads the latest row and the row of digest, if any.
func (t *table) readLedger(ctx context.Context, digest string) (ledgerState, error) {
	var st ledgerState
	cctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	name := qualified(t.m.Target.Database, ledgerName(t.m))
	read := func(where string, args ...any) (*ledgerEntry, error) {
		rows, err := t.conn.Query(cctx, "SELECT "+ledgerColumnList(true)+" FROM "+name+" "+where, args...)
		if err != nil {
			return nil, classify(fmt.Errorf("read the ledger %s: %w", name, err))
		}
		defer rows.Close()
		var e *ledgerEntry
		for rows.Next() {
			var x ledgerEntry
			var lastTxSet uint8
			var open string
			if err := rows.Scan(&x.seq, &x.kind, &x.digest, &x.appliedAt, &x.holder, &x.events, &x.keys, &x.pending,
				&x.minVersion, &x.maxVersion, &x.highVersion, &x.snapshotLSN, &x.lastTx, &lastTxSet, &x.lastFloor, &open,
				&x.source.connector, &x.source.name, &x.source.version, &x.source.db); err != nil {
				return nil, classify(fmt.Errorf("read the ledger %s: %w", name, err))
			}
			x.lastTxSet = lastTxSet != 0
			if open != "" {
				if err := json.Unmarshal([]byte(open), &x.openKeys); err != nil {
					return nil, outcome.Refused.Mark(fmt.Errorf("%w: the ledger %s row %d has malformed open_keys (%v); it was written by something else than changesink: restore the ledger or rebuild the target",
						ErrTargetMismatch, name, x.seq, err))
				}
			}
			e = &x
		}
		if err := rows.Err(); err != nil {
			return nil, classify(fmt.Errorf("read the ledger %s: %w", name, err))
		}
		return e, nil
	}
	var err error
	if st.last, err = read("ORDER BY seq DESC LIMIT 1"); err != nil {
		return st, err
	}
	if st.last != nil && digest != "" {
		if st.replay, err = read("WHERE digest = ? AND kind = ? ORDER BY seq LIMIT 1", digest, ledgerBatch); err != nil {
			return st, err
		}
		if st.replay != nil && st.replay.seq > 1 {
			if st.beforeReplay, err = read("WHERE seq = ? LIMIT 1", st.replay.seq-1); err != nil {
				return st, err
			}
		}
	}
	return st, nil
}

// appendLedger writes one ledger row (seq: the last one's plus one).
func (t *table) appendLedger(ctx context.Context, prev *ledgerEntry, e *ledgerEntry) error {
	e.seq = 1
	if prev != nil {
		e.seq = prev.seq + 1
	}
	open := ""
	if len(e.openKeys) > 0 {
		b, err := json.Marshal(e.openKeys)
		if err != nil {
			return err
		}
		open = string(b)
	}
	cctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	name := qualified(t.m.Target.Database, ledgerName(t.m))
	b, err := t.conn.PrepareBatch(cctx, "INSERT INTO "+name+" ("+ledgerColumnList(false)+")")
	if err != nil {
		return ledgerWriteErr(name, err)
	}
	defer b.Close()
	if err := b.Append(e.seq, e.kind, e.digest, e.holder, e.events, e.keys, e.pending, e.minVersion, e.maxVersion,
		e.highVersion, e.snapshotLSN, e.lastTx, uint8(boolByte(e.lastTxSet)), e.lastFloor, open,
		e.source.connector, e.source.name, e.source.version, e.source.db); err != nil {
		return fmt.Errorf("write the ledger %s: %w", name, err)
	}
	if err := b.Send(); err != nil {
		return ledgerWriteErr(name, err)
	}
	return nil
}

// ledgerWriteErr wraps a failed ledger write. A ledger dropped during the
// run (UNKNOWN_TABLE) is left unclassified, for apply to say what it means
// there (re-run: apply makes the ledger itself), not classify's "run
// changesink cdc setup first".
func ledgerWriteErr(name string, err error) error {
	err = fmt.Errorf("write the ledger %s: %w", name, err)
	if chCode(err) == chUnknownTable {
		return err
	}
	return classify(err)
}

// ensureLedger reads the ledger's latest row and the row of digest
// (readLedger), creating the ledger first when it is missing (a target the
// seed flow made, or one set up before the ledger existed) and checking
// its columns when it cannot be read; a new ledger over a target that
// holds rows gets a baseline row: the target's highest version, so that an
// older batch is still told from a new one. A ledger with rows is read in
// one pass. It runs under the lock.
func (t *table) ensureLedger(ctx context.Context, holder, digest string) (ledgerState, error) {
	st, err := t.readLedger(ctx, digest)
	if err == nil && st.last != nil {
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
	m := t.m
	if err := t.exec(cctx, createLedgerSQL(m)); err != nil {
		return st, err
	}
	if err := t.checkLedger(cctx); err != nil {
		return st, err
	}
	var high uint64
	var n uint64
	name := qualified(m.Target.Database, m.Target.Table)
	if err := t.conn.QueryRow(cctx, "SELECT count(), max("+quoteIdent(m.Target.VersionColumn)+") FROM "+name).Scan(&n, &high); err != nil {
		return st, classify(fmt.Errorf("read the highest version of %s: %w", name, err))
	}
	if n > 0 {
		if err := t.appendLedger(ctx, nil, &ledgerEntry{kind: ledgerBaseline, holder: holder, keys: n, maxVersion: high, highVersion: high}); err != nil {
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
func (t *target) checkOrphanLedger(ctx context.Context) error {
	m := t.m
	cctx, cancel := context.WithTimeout(ctx, t.timeout)
	_, found, err := t.describe(cctx, m.Target.Database, m.Target.Table)
	cancel()
	if err != nil || found {
		return err
	}
	st, err := (&table{target: t}).readLedger(ctx, "")
	switch {
	case chCode(err) == chUnknownTable || chCode(err) == chUnknownDatabase:
		return nil
	case err != nil:
		return err
	case st.last == nil:
		return nil
	}
	tbl, ledger := qualified(m.Target.Database, m.Target.Table), qualified(m.Target.Database, ledgerName(m))
	return outcome.Config.Mark(fmt.Errorf("%w: table %s does not exist, but its ledger %s records applied batches (its last row is %s): "+
		"the table was dropped, and a new empty one would lack the rows of the batches the ledger records as applied. "+
		"Restore the table from a backup; or rebuild: DROP TABLE %s (and DROP TABLE IF EXISTS %s, the live view), re-run changesink cdc setup, "+
		"and have the trigger take a new snapshot (a new slotName and stateName, or drop the replication slot and the trigger's state). "+
		"Nothing was created",
		ErrTargetMismatch, tbl, ledger, describeEntry(ledger, st.last), ledger, qualified(m.Target.Database, m.Target.LiveView)))
}

// checkLedger refuses a ledger table whose columns are not the ledger's.
func (t *target) checkLedger(ctx context.Context) error {
	m := t.m
	cols, err := t.columns(ctx, m.Target.Database, ledgerName(m))
	if err != nil {
		return err
	}
	got := map[string]string{}
	for _, c := range cols {
		got[c.name] = c.typ
	}
	for _, c := range ledgerColumns {
		if got[c[0]] != c[1] {
			return outcome.Config.Mark(fmt.Errorf("%w: the ledger %s has no column %s %s (it has %q); it is changesink's: drop it and re-run changesink cdc setup only if the target is rebuilt too",
				ErrTargetMismatch, qualified(m.Target.Database, ledgerName(m)), c[0], c[1], got[c[0]]))
		}
	}
	return nil
}

// seedsOf turns the previous batch's open keys into the batch's seeds: the
// target holds each key's newest row (cur); the others are known by hash.
func seedsOf(m *Mapping, open []openDual, cur map[string]*row, replay bool) (map[string]*seedDual, error) {
	seeds := map[string]*seedDual{}
	for _, o := range open {
		k, err := hex.DecodeString(o.Key)
		if err != nil {
			return nil, outcome.Refused.Mark(fmt.Errorf("%w: the ledger's open key %q is not hex", ErrTargetMismatch, o.Key))
		}
		r := cur[string(k)]
		if replay && (r == nil || r.deleted) {
			// A replay of the batch that met this key: the target holds a
			// later version of it, which the verify accepts whatever it is.
			r = &row{vals: make([]value, len(m.cols))}
		}
		if r == nil || r.deleted {
			return nil, outcome.Refused.Mark(&RecordError{Offset: -1, Key: o.Shown, Err: fmt.Errorf(
				"%w: key %s: the previous batch left this key with two live rows inside transaction %d, but the target no longer holds its newest row; another writer changed the target: rebuild it",
				ErrKeyChange, o.Shown, o.Tx)})
		}
		s := &seedDual{shown: o.Shown, tx: o.Tx, vals: r.vals, version: r.lsn}
		for _, h := range o.Others {
			n, err := strconv.ParseUint(h, 16, 64)
			if err != nil {
				return nil, outcome.Refused.Mark(fmt.Errorf("%w: the ledger's open key %s has a malformed row hash %q", ErrTargetMismatch, o.Shown, h))
			}
			s.others = append(s.others, n)
		}
		seeds[string(k)] = s
	}
	return seeds, nil
}

// describeEntry renders a ledger row for messages.
func describeEntry(name string, e *ledgerEntry) string {
	if e.kind == ledgerBaseline {
		return fmt.Sprintf("%s row %d (the rows the target held when its ledger was made, %s): versions up to %d",
			name, e.seq, e.appliedAt.UTC().Format(time.RFC3339), e.highVersion)
	}
	return fmt.Sprintf("%s row %d (batch applied %s by %s, %d events from %s): versions up to %d",
		name, e.seq, e.appliedAt.UTC().Format(time.RFC3339), e.holder, e.events, e.source.describe(), e.highVersion)
}

func (s *sourceID) describe() string {
	if s == nil || (s.connector == "" && s.name == "" && s.db == "") {
		return "an unnamed source"
	}
	return fmt.Sprintf("connector %s %q (Debezium %s) on database %s", s.connector, s.name, s.version, s.db)
}

// redecodeWithSeeds decodes the batch again, starting the keys the
// previous batch left with two live rows from what it left (the target
// holds their newest row).
func (t *table) redecodeWithSeeds(ctx context.Context, path string, workers int, open []openDual, replay bool) (*batch, error) {
	keys := make([]*row, 0, len(open))
	for _, o := range open {
		k, err := hex.DecodeString(o.Key)
		if err != nil {
			return nil, outcome.Refused.Mark(fmt.Errorf("%w: the ledger's open key %q is not hex", ErrTargetMismatch, o.Key))
		}
		keys = append(keys, &row{key: string(k), vals: keyVals(t.m, string(k))})
	}
	cur, err := t.read(ctx, keys)
	if err != nil {
		return nil, err
	}
	seeds, err := seedsOf(t.m, open, cur, replay)
	if err != nil {
		return nil, err
	}
	b, err := decodeFileWith(ctx, path, t.m, decodeOptions{workers: workers, seeds: seeds})
	if err != nil {
		return nil, markInput(err)
	}
	return b, nil
}

// keyVals decodes key bytes (encodeKey) into a row's values: the key
// columns set, the others zero.
func keyVals(m *Mapping, key string) []value {
	vals := make([]value, len(m.cols))
	b := []byte(key)
	for _, i := range m.keyIdx {
		switch m.cols[i].typ.kind {
		case kindString, kindDecimal, kindUUID:
			n, w := binary.Uvarint(b)
			if w <= 0 || uint64(len(b)-w) < n {
				return vals
			}
			vals[i] = value{s: string(b[w : w+int(n)])}
			b = b[w+int(n):]
		default:
			if len(b) < 8 {
				return vals
			}
			vals[i] = value{n: binary.BigEndian.Uint64(b)}
			b = b[8:]
		}
	}
	return vals
}

// sourceID is the source as a batch shows it (metadata.source): the
// connector, its name (Kestra derives it from the flow and the trigger), the
// Debezium version and the database. The ledger records it.
type sourceID struct {
	connector, name, version, db string
}

// sourceOf reads the source identity of the batch's first event (with
// ion-go: one record; the batch decoded already, so it is well formed).
// Fields it cannot read stay empty.
func sourceOf(path string, m *Mapping) sourceID {
	var id sourceID
	f, err := os.Open(path)
	if err != nil {
		return id
	}
	defer f.Close()
	br := bufio.NewReader(f)
	var in io.Reader = br
	if head, _ := br.Peek(4); !batchfile.IsBinary(head) {
		in = ionesc.NewReader(br) // as the batch was decoded
	}
	r := ion.NewReader(in)
	for r.Next() && isVersionSymbol(r) {
	}
	if r.Type() != ion.StructType || r.StepIn() != nil || !stepIntoField(r, m.Source.MetadataField) || !stepIntoField(r, "source") {
		return id
	}
	for r.Next() {
		name, err := r.FieldName()
		if err != nil || name == nil || name.Text == nil || r.Type() != ion.StringType {
			continue
		}
		v, err := r.StringValue()
		if err != nil || v == nil {
			continue
		}
		switch *name.Text {
		case "connector":
			id.connector = *v
		case "name":
			id.name = *v
		case "version":
			id.version = *v
		case "db":
			id.db = *v
		}
	}
	return id
}

// stepIntoField steps into the struct field named field of the struct r
// is in, reporting whether it found one.
func stepIntoField(r ion.Reader, field string) bool {
	for r.Next() {
		if name, err := r.FieldName(); err == nil && name != nil && name.Text != nil && *name.Text == field {
			return r.Type() == ion.StructType && r.StepIn() == nil
		}
	}
	return false
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}
