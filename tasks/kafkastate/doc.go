// Package kafkastate keeps the latest JSON value per key of a compacted Kafka
// topic in PostgreSQL: a record's value and the read position past it commit
// in one PostgreSQL transaction. It replaces the materialize_batch task of
// the seed flow kafka-compacted-postgres-state and keeps its tables, its
// topic lock and every one of its checks.
//
// Setup creates schema kafka_state with the seed's DDL (positions, records,
// the view current_values); it is idempotent. Materialize reads one bounded
// batch (Config.MaxRecords, Config.PollSeconds) with no consumer group and
// no Kafka offsets: raw Fetch requests at isolation level read_committed,
// by topic id, every partition from its saved next offset to its last
// stable offset, concurrently (kafka.go, fetch.go). In one transaction it
// takes the seed's advisory lock on the topic (lock.go), COPYs the batch
// into a staging table and merges the highest offset per key, only where it
// is higher than the stored row's (batch.go and its steps, sql.go), writes the next
// offsets and commits; only then is batch-report.json written and the
// Result returned. Verify checks that every stored record is below its
// partition's durable next offset.
//
// Guarantees:
//   - Exactly once into PostgreSQL: values, tombstones and positions commit
//     together or not at all, so a re-run after any failure converges to
//     the state of an uninterrupted run.
//   - The stored next offset is the exact next offset to fetch, past
//     aborted transactions, transaction markers and compacted tails; the
//     seed's offsets are accepted, and the seed accepts these.
//   - A batch that may have missed tombstones the cleaner removed
//     (delete.retention.ms passed since the state was last caught up) is
//     refused before anything is written (tombstones.go).
//   - A failure commits nothing; the one exception, a connection lost after
//     COMMIT was sent, is looked up (txid_status, indoubt.go) and reported
//     as committed, aborted, or, when PostgreSQL cannot tell within 15 s,
//     in doubt.
//
// Refusals are the sentinels of errors.go, marked outcome.Refused (exit 1),
// naming the topic and, where they apply, the partition, offset and key
// (*RecordError, *OffsetError, *MovedKeyError, *TombstoneError,
// *AheadError): ErrTopicUnavailable, ErrNoIDs, ErrIDsChanged,
// ErrPartitionsChanged, ErrValuesWithoutPositions, ErrBadPositions,
// ErrOffsetOutOfRange, ErrTombstonesMayBeLost, ErrNullKey, ErrKeyNotUTF8,
// ErrKeyNUL, ErrKeyTooLong, ErrValueNotUTF8, ErrValueNotJSON,
// ErrValueTooLarge, ErrNonFinite, ErrKeyMovedPartitions, ErrTopicChanged and
// ErrAheadOfPositions. A held topic lock (ErrLocked), lost connections and
// timeouts are outcome.Transient (exit 3); bounds, KAFKA_PROPERTIES,
// PostgreSQL settings and a TOPIC no batch ever read, or read on another
// cluster, are outcome.Config (exit 2).
//
// What each batch reads and writes, statement by statement, and the
// tombstone rule: docs/kafka-state.md. The seed rule each check keeps:
// docs/seed-rules.md.
package kafkastate
