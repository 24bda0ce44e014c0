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
// *AheadError, *OverlapError, *TopicError): ErrTopicUnavailable, ErrNoIDs,
// ErrIDsChanged, ErrPartitionsChanged, ErrValuesWithoutPositions,
// ErrBadPositions, ErrOffsetOutOfRange (narrowed by ErrOffsetPastEnd),
// ErrTombstonesMayBeLost (narrowed by ErrReadsTooSlow), ErrNullKey,
// ErrKeyNotUTF8, ErrKeyNUL, ErrKeyTooLong, ErrValueNotUTF8,
// ErrValueNotJSON, ErrValueTooLarge, ErrNonFinite, ErrKeyMovedPartitions,
// ErrTopicChanged, ErrShardOverlap and ErrAheadOfPositions.
// ErrTopicUnavailable is a configuration error instead for a TOPIC no
// batch ever read, or read on another cluster.
//
// With Config.OnBadRecord "reject" (ON_BAD_RECORD), a record that breaks a
// record rule found while reading (ErrNullKey, ErrKeyNotUTF8, ErrKeyNUL,
// ErrValueNotUTF8, ErrValueNotJSON, ErrNonFinite) is not refused: the batch
// writes it into kafka_state.rejected (reject.go), keyed by its topic,
// partition and offset, in the transaction of its positions, and leaves
// its key's stored row as it was.
//
// Transient failures (outcome.Transient, exit 3) commit nothing, except
// where they say so: a held topic lock (ErrLocked), a stop (ErrStopped), a
// lost connection or a terminated backend (ErrNothingCommitted), a COMMIT
// whose answer was lost (ErrCommitInDoubt, ErrCommitWaitsForStandby;
// ErrNothingCommitted when it aborted; ErrSetupInDoubt for setup), a
// report file not written or not published (ErrReportNotWritten;
// ErrReportNotPublished, after the commit), and the PostgreSQL and Kafka
// causes below that a retry outlives. Configuration errors
// (outcome.Config, exit 2): bounds, KAFKA_PROPERTIES (ErrEncryptedPKCS8),
// PG_DSN (ErrJDBCURL), a working directory that cannot take the report
// (ErrWorkingDir), a SHARD that owns no partition (ErrEmptyShard),
// ON_BAD_RECORD=reject in a database without kafka_state.rejected
// (ErrNoRejectedTable), the problems kafka-state check found
// (ErrCheckFailed, a *CheckError wrapping each: check.go), and the causes
// below that only a change of settings mends.
//
// A PostgreSQL failure is a *PGError (the operation, the SQLSTATE, the
// driver's error) and a Kafka request that got no answer a *KafkaError;
// either unwraps to the cause whose remedy Hint returns, where kafka-state
// knows one: ErrPGLogin, ErrPGNoTLS, ErrPGTLS, ErrNotSetUp, ErrPGReadOnly,
// ErrPGPrivileges, ErrAddedConstraint, ErrNotUTF8Database (configuration);
// ErrPGUnreachable, ErrPGStatementTimeout, ErrPGLockTimeout,
// ErrPGIdleTimeout (transient); ErrKafkaNotTLS, ErrKafkaNotPlaintext,
// ErrKafkaTLS, ErrKafkaSASL, ErrKafkaNotAuthorized (configuration);
// ErrKafkaUnreachable, ErrKafkaNotReady (transient); ErrTopicConfig
// (internal: a broker that does not answer as Kafka does). Messages are
// one line of operation, cause and facts; what to do is Hint's, and
// docs/runbook.md has a section for each cause, holding the same text.
//
// What each batch reads and writes, statement by statement, and the
// tombstone rule: docs/kafka-state.md. The seed rule each check keeps:
// docs/seed-rules.md.
package kafkastate
