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
// OFF; text Ion from Kestra 1.x, binary from 2.x). Its steps, each in a
// file named for it: decode (while connecting), lock, readTarget,
// selectPending, writeOutputs, insert, verify, record, release, publish.
//
// The work is layered in packages that import one way only:
//
//	mapping  the mapping file and the ClickHouse column types (no I/O)
//	change   the change model: rows, values, versions, refusals, ledger rows
//	decode   the trigger's Ion batches into rows
//	merge    pure: the latest row per key, TOAST fill, key changes, selection
//	target   ClickHouse: connect, setup, reads, insert, the ledger, the lock
//
// and this package, the orchestration, is the only one that calls more
// than one of them, passing their results along as values.
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
// Errors say what failed and where (record, key, LSN, column, table); they
// are marked with their class (internal/outcome: refused, config,
// transient), and Hint gives the remedy of each, which the CLI prints apart
// and docs/runbook.md explains. How versions follow commit order, how key
// changes, TRUNCATE and unchanged TOAST values are applied, and the
// ClickHouse versions supported: docs/cdc.md. The seed rule each check
// keeps: docs/seed-rules.md.
package cdc
