// Package cdc is the cdc job's facade, the one package cmd/changesink
// imports: the commands, their settings (Config, SyncConfig, the Env*
// names and defaults), their results, the errors they return and Hint,
// the one table of their remedies. It keeps a ClickHouse read model of
// PostgreSQL tables, for any table a Mapping describes, in two ways:
//
//   - the trigger flow: Setup creates, or checks, a target (a
//     ReplacingMergeTree versioned by the change's position in
//     PostgreSQL's commit order, its live view of FINAL without delete
//     markers, its ledger of applied batches), and Apply applies one batch
//     of Kestra's Debezium PostgreSQL trigger (format INLINE, deleted and
//     metadata ADD_FIELD, splitTable OFF; text Ion from Kestra 1.x, binary
//     from 2.x), replacing the nine tasks of the seed flow
//     postgres-clickhouse-cdc. Apply's own steps are here, each in a file
//     named for it: decode (while connecting), lock, writeOutputs,
//     release, publish; the rest is applier's.
//   - the replication slot: SetupSync creates the publication and the
//     slot, sets every published table's target up and loads the tables
//     from the slot's exported snapshot; Sync streams the slot into the
//     targets (package slotsync, docs/cdc-sync.md).
//
// The work is in packages that import one way only, the compiler holding
// it:
//
//	mapping   the mapping file and the ClickHouse column types (no I/O)
//	change    the change model: rows, values, versions, refusals, ledger rows
//	decode    the trigger's Ion batches into rows
//	merge     pure: the latest row per key, TOAST fill, key changes, selection
//	pgvalue   PostgreSQL's text of a value into a change value
//	slot      the replication slot: setup, stream, health (docs/cdc-slot.md)
//	target    ClickHouse: connect, setup, reads, insert, the ledgers, the lock
//	applier   one merged batch into one target under its lock, read back
//	          and recorded: what Apply and Sync share (docs/cdc.md)
//	initload  tables copied from an exported snapshot in parallel chunks
//	          (docs/initial-load.md)
//	slotsync  cdc sync and its setup: source, targets, positions, stream,
//	          schema changes, flush, the initial load's orchestration
//
// applier, initload and slotsync are the rooms of the commands: slotsync
// imports applier and initload, neither imports slotsync, and applier does
// not import initload. This package calls them and passes their results
// along as values.
//
// Guarantees of Apply:
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
// Sync keeps the same per target, and confirms the slot only after every
// target's read-back passed (docs/cdc-sync.md).
//
// Errors say what failed and where (record, key, LSN, column, table); they
// are marked with their class (internal/outcome: refused, config,
// transient), and Hint gives the remedy of each, which the CLI prints apart
// and docs/runbook.md explains. How versions follow commit order, how key
// changes, TRUNCATE and unchanged TOAST values are applied, and the
// ClickHouse versions supported: docs/cdc.md. The seed rule each check
// keeps: docs/seed-rules.md.
package cdc
