package change

import (
	"errors"
	"fmt"
	"strings"
)

// Refusals of a batch. Apply returns them wrapped in a *RecordError (when a
// record is to blame) and marked with outcome.Refused, so callers test them
// with errors.Is and the process exits 1. Nothing is written to ClickHouse
// when one of them is returned, except ErrVerify and an ErrTargetMismatch
// of a stored row the read-back cannot read: both are found after the
// insert, and a re-run converges.
var (
	// ErrEmptyBatch: the batch holds no change events (seed: "Empty CDC batch").
	ErrEmptyBatch = errors.New("empty CDC batch")
	// ErrMalformed: the file is not Ion, or a record is truncated or garbled.
	ErrMalformed = errors.New("malformed Ion")
	// ErrNotStruct: a top-level value is not a struct (one change event).
	ErrNotStruct = errors.New("change event is not an Ion struct")
	// ErrSourceChanged: an event carries a column the mapping does not know
	// (seed: "Source columns changed; update this fixed-schema flow").
	ErrSourceChanged = errors.New("source columns changed; update the mapping before continuing")
	// ErrWrongSource: metadata.source db/schema/table differ from the mapping
	// (seed: "Expected changes from public.orders in the configured source database").
	ErrWrongSource = errors.New("change from another source table")
	// ErrMissingField: a required field (a mapped column of a create/update/read
	// event, a key column, metadata, metadata.source or its lsn) is absent.
	ErrMissingField = errors.New("missing field")
	// ErrBadLSN: metadata.source.lsn is not an integer in 1..2^64-1 (seed:
	// "Invalid source LSN").
	ErrBadLSN = errors.New("invalid source LSN")
	// ErrBadTxID: metadata.source.txId is present but not an integer in
	// 0..2^63-1 (Debezium writes PostgreSQL's transaction id, a long; an
	// absent or null txId is a change without one).
	ErrBadTxID = errors.New("invalid source transaction id")
	// ErrBadDeleteMarker: the deleted field is present but not a boolean
	// (seed: "Invalid delete marker").
	ErrBadDeleteMarker = errors.New("invalid delete marker")
	// ErrBadValue: a value has the wrong Ion type for its column, does not
	// fit the column's range, precision or maximum length, or is null in a
	// column that is not Nullable (seed: "Invalid <column>", "Unsupported status").
	ErrBadValue = errors.New("value does not fit its column")
	// ErrToast: a column holds Debezium's unavailable-value placeholder for an
	// unchanged TOAST value (seed: "incomplete TOAST value").
	ErrToast = errors.New("incomplete TOAST value (__debezium_unavailable_value)")
	// ErrContradiction: an event contradicts itself or the events before it
	// (Debezium writes none of these):
	//   - metadata.operation DELETE without deleted true, or CREATE, UPDATE
	//     or READ with deleted true;
	//   - an operation Debezium does not send;
	//   - a TRUNCATE with row columns, or whose deleted is not true;
	//   - a metadata.source.sequence naming another LSN than source.lsn, or
	//     an lsn_commit outside 0..2^64-2;
	//   - two lsn_commit values in one transaction (its consecutive events);
	//   - an lsn_commit below an earlier event's (transactions arrive in
	//     commit order, so it never goes down in a batch);
	//   - two changes of one transaction tied at its commit floor (one
	//     version) whose LSNs go down (the records were reordered).
	ErrContradiction = errors.New("event contradicts itself")
	// ErrWentBackwards: a batch that was never applied is not newer than
	// what the target holds (a source restored, migrated or failed over
	// with other LSNs, or an old batch replayed after newer ones).
	ErrWentBackwards = errors.New("versions went backwards: was the source restored or migrated?")
	// ErrKeyChange: a primary-key change (a deferrable key swapped or
	// shifted in one transaction) whose result the batch does not determine;
	// the message names the keys.
	ErrKeyChange = errors.New("a primary-key change cannot be applied key by key")
	// ErrConflict: two events share a key and an LSN but differ (seed:
	// "Conflicting changes share an id and LSN").
	ErrConflict = errors.New("conflicting changes share a key and LSN")
	// ErrTargetConflict: the target already holds a different row at the
	// batch's key and LSN (seed: "Target has a different payload for the same
	// id and LSN"). Nothing was written.
	ErrTargetConflict = errors.New("target has a different payload for the same key and LSN")
	// ErrVerify: the read-back after the insert does not show the captured
	// version or a newer one (seed: "ClickHouse read-back does not match the
	// captured version", "Captured key is missing from ClickHouse").
	ErrVerify = errors.New("ClickHouse read-back does not match the captured version")
)

// Refusals of cdc sync, before anything is written.
var (
	// ErrNotLoaded: the sync ledger has no row for the slot: the targets
	// were not loaded from this slot's snapshot (cdc setup does that).
	ErrNotLoaded = errors.New("the slot's tables were not loaded by changesink cdc setup")
	// ErrOtherSource: the sync ledger holds the slot for another source
	// (system identifier or database): a restore, a migration or a
	// failover with other LSNs.
	ErrOtherSource = errors.New("the slot is of another source than the one the targets were loaded from")
	// ErrSlotAhead: the slot was confirmed past what the targets hold:
	// another consumer of the slot took changes sync never applied (a gap).
	ErrSlotAhead = errors.New("the slot is ahead of the targets: changes were lost")
	// ErrSchemaChange: a source table's columns changed in a way no
	// mapping can follow (an added column of a type none is generated for,
	// a retype the mapping entry's type cannot hold), or any change under
	// schema_changes: refuse: the table is held at the change.
	ErrSchemaChange = errors.New("the source table's columns changed")
	// ErrHeld: one or more tables are held (quarantine): a change of each
	// was refused, and its changes from there on are skipped, the other
	// tables applied; until an operator's resync (CDC_RESYNC) loads it
	// again, every run fails naming it.
	ErrHeld = errors.New("tables are held: their changes are skipped until a resync")
	// ErrChangedDuringLoad: a table was rewritten (ALTER TABLE … TYPE, a
	// volatile default: a snapshot older than the rewrite sees it empty) or
	// lost a column the load reads, after the load's snapshot was taken:
	// the chunk read is not recorded (transient: the load continues from a
	// new snapshot).
	ErrChangedDuringLoad = errors.New("the table changed during its load")
)

// Transient failures, marked with outcome.Transient (exit 3): a retry of
// the run converges.
var (
	// ErrTargetLocked: another cdc apply held the target's lock for the
	// whole wait, or this run lost its lock before the insert or the ledger
	// row (its heartbeats stopped landing, or another run broke it).
	ErrTargetLocked = errors.New("another cdc apply holds the target's lock")
)

// Configuration errors, marked with outcome.Config (exit 2).
var (
	// ErrTargetMismatch: the target's shape differs from the mapping (the
	// table's columns, engine, version column or sorting key, the live view's
	// columns, the ledger's columns, or a ledger left by a dropped table):
	// outcome.Config; re-run cdc setup on a fresh table, or fix the mapping.
	// It is also the refusal (outcome.Refused, exit 1) of stored rows of the
	// target or its ledger that cannot be read or are not what changesink
	// wrote (a value its column cannot hold, a delete marker other than 0 or
	// 1, malformed open keys in the ledger): repair or rebuild the target.
	ErrTargetMismatch = errors.New("target table does not match the mapping")
	// ErrViewMismatch: the live view is not a view of the mapped columns
	// (ErrTargetMismatch's narrower cause, a configuration error).
	ErrViewMismatch = fmt.Errorf("%w: the live view is not a view of the mapped columns", ErrTargetMismatch)
	// ErrTargetRowUnreadable: a read found a stored row of the target or its
	// ledger that changesink could not have written (ErrTargetMismatch's
	// narrower cause, a refusal: another writer changed the table).
	ErrTargetRowUnreadable = fmt.Errorf("%w: a stored row is not changesink's", ErrTargetMismatch)
	// ErrPreflight: cdc check (or setup, before it creates anything) found
	// problems setup would refuse on; each is wrapped beside it.
	ErrPreflight = errors.New("setup's checks found problems")
	// ErrNoDatabase: cdc setup found no target database and the mapping does
	// not ask it to create one (target.create_database).
	ErrNoDatabase = errors.New("target database does not exist")
	// ErrUnsupportedServer: the ClickHouse server lacks a type the mapping
	// uses (DateTime64 needs ClickHouse 20.1 or newer, a Decimal of more
	// than 38 digits 21.6 or newer).
	ErrUnsupportedServer = errors.New("ClickHouse server does not support the mapping")
	// ErrConfig: a Config field is missing or out of range.
	ErrConfig = errors.New("invalid configuration")
)

// Narrower causes of the errors above, each with a remedy of its own
// (cdc.Hint); errors.Is matches both a cause and the error it narrows.
var (
	// ErrNotTriggerBatch: a record has no metadata field: the file is not
	// a batch of Kestra's Debezium trigger, or the trigger does not add the
	// metadata (ErrMissingField).
	ErrNotTriggerBatch = fmt.Errorf("%w: not a batch of Kestra's Debezium trigger with metadata", ErrMissingField)
	// ErrNotNullable: a column the trigger left out (a NULL) is not
	// Nullable in the mapping (ErrMissingField).
	ErrNotNullable = fmt.Errorf("%w: NULL in a column that is not Nullable", ErrMissingField)
	// ErrToastAfterDelete: an update leaves a TOAST column unchanged right
	// after a delete of its key in the same batch (ErrToast).
	ErrToastAfterDelete = fmt.Errorf("%w: unchanged after a delete", ErrToast)
	// ErrNotShown: a Date or DateTime the server stores but reads back as
	// 1970 (the top of their ranges on ClickHouse 18.16).
	ErrNotShown = fmt.Errorf("%w: beyond the dates the server shows", ErrBadValue)
	// ErrUnplaced: a change older than the target, of the first
	// transaction after a snapshot that neither the batch nor the ledger
	// knows (ErrWentBackwards).
	ErrUnplaced = fmt.Errorf("%w: a change after an unknown snapshot", ErrWentBackwards)
	// ErrOrphanLedger: the target table is gone but its ledger records
	// applied batches (ErrTargetMismatch).
	ErrOrphanLedger = fmt.Errorf("%w: the table was dropped", ErrTargetMismatch)
)

// RecordError locates a refusal in the batch: the record number (1-based,
// counting top-level values), the text line when known, the byte offset for
// malformed input, and the key, LSN and column when they are known.
type RecordError struct {
	// Record is the 1-based number of the change event in the batch; 0 when
	// the error is not tied to one record.
	Record int64
	// Line is the 1-based text line of the record, 0 when unknown (binary Ion).
	Line int64
	// Offset is the byte offset in the file for malformed input, -1 when unknown.
	Offset int64
	// Key renders the record's key columns ("id=42"), "" when unknown.
	Key string
	// LSN is the record's source LSN, 0 when unknown.
	LSN uint64
	// Version is the record's version (order.go) when it is not its LSN, else 0.
	Version uint64
	// Column is the column or field at fault, "" when none.
	Column string
	// Other names a second record involved (equal-LSN conflicts), 0 if none.
	Other int64
	// Streamed: a change of the replication slot (cdc sync), not a record
	// of a batch: named "change", its LSN as PostgreSQL writes one (X/Y);
	// a batch's LSN stays the decimal the Debezium record holds.
	Streamed bool
	// Err is the cause; it wraps one of the package's sentinels.
	Err error
}

// FormatLSN writes an LSN as PostgreSQL does: two hexadecimal halves.
func FormatLSN(lsn uint64) string { return fmt.Sprintf("%X/%X", uint32(lsn>>32), uint32(lsn)) }

func (e *RecordError) Error() string {
	var b strings.Builder
	switch {
	case e.Record > 0:
		fmt.Fprintf(&b, "record %d", e.Record)
	case e.Streamed:
		b.WriteString("change")
	default:
		b.WriteString("batch")
	}
	var where []string
	if e.Line > 0 {
		where = append(where, fmt.Sprintf("line %d", e.Line))
	}
	if e.Offset >= 0 {
		where = append(where, fmt.Sprintf("byte %d", e.Offset))
	}
	if e.Key != "" {
		where = append(where, "key "+e.Key)
	}
	switch {
	case e.LSN != 0 && e.Streamed:
		where = append(where, "LSN "+FormatLSN(e.LSN))
	case e.LSN != 0:
		where = append(where, fmt.Sprintf("LSN %d", e.LSN))
	}
	if e.Version != 0 && e.Version != e.LSN {
		where = append(where, fmt.Sprintf("version %d", e.Version))
	}
	if e.Other > 0 {
		where = append(where, fmt.Sprintf("same as record %d", e.Other))
	}
	if len(where) > 0 {
		b.WriteString(" (" + strings.Join(where, ", ") + ")")
	}
	if e.Column != "" {
		fmt.Fprintf(&b, ", column %q", e.Column)
	}
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *RecordError) Unwrap() error { return e.Err }
