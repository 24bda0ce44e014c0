// Package cdc applies Debezium change batches to a ClickHouse read model and
// verifies every batch by reading it back. It replaces the nine tasks of the
// seed flow postgres-clickhouse-cdc with two commands, for any table a
// Mapping describes.
//
// Setup creates, or checks, the target: a ReplacingMergeTree versioned by
// the change's position in PostgreSQL's commit order, its live view (FINAL,
// delete markers left out) and its ledger of applied batches.
//
// Apply applies one batch: the Ion file Kestra's Debezium PostgreSQL
// trigger writes (format INLINE, deleted and metadata ADD_FIELD, splitTable
// OFF; text Ion from Kestra 1.x, binary from 2.x). In order: every record is
// decoded and checked against the mapping (reader.go, record.go,
// column.go), the latest change per key is kept by version (batch.go,
// order.go), the target's lock is taken (lock.go), the ledger (ledger.go)
// and the target's winning rows of the batch's keys are read (FINAL), the
// pending rows are inserted in one block, every key is read back, the
// ledger row is appended and the lock released; then expected.jsonl and
// pending.jsonl, written before the insert, are published (renamed into
// place) and the Result returned.
//
// Guarantees:
//   - Nothing is written when a record is refused: the whole batch is
//     checked before ClickHouse is read or written.
//   - At least once and idempotent: a re-run of a batch, after any failure,
//     converges (rows are versioned; a batch the ledger holds is a replay,
//     skipped and verified again).
//   - A key's change is skipped only when the target holds it or a newer
//     one, and an equal version with another payload is refused.
//   - Outputs and output files appear only after the read-back passed.
//   - One apply at a time per target (the lock); values are never rounded.
//
// Refusals are the sentinels of errors.go, wrapped, when a record is to
// blame, in a *RecordError that names the record, line, key, LSN and column,
// and marked outcome.Refused (exit 1): ErrEmptyBatch, ErrMalformed,
// ErrNotStruct, ErrSourceChanged, ErrWrongSource, ErrMissingField,
// ErrBadLSN, ErrBadTxID, ErrBadDeleteMarker, ErrBadValue, ErrToast,
// ErrContradiction, ErrConflict, ErrKeyChange, ErrTargetConflict,
// ErrWentBackwards and ErrVerify (found after the insert).
// ErrMapping (*MappingError), ErrTargetMismatch, ErrNoDatabase,
// ErrUnsupportedServer and ErrConfig are marked outcome.Config (exit 2),
// except ErrTargetMismatch for stored rows of the target or its ledger that
// cannot be read or are not what changesink wrote, which is marked
// outcome.Refused (exit 1); ErrTargetLocked and lost, unreachable or
// overloaded servers outcome.Transient (exit 3).
//
// How versions follow commit order, how key changes, TRUNCATE and unchanged
// TOAST values are applied, and the ClickHouse versions supported:
// docs/cdc.md. The seed rule each check keeps: docs/seed-rules.md.
package cdc
