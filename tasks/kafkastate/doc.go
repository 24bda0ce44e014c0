// Package kafkastate keeps the latest JSON value per key of a compacted Kafka
// topic in PostgreSQL, exactly once: the records' values and the read
// positions are committed in one PostgreSQL transaction. It replaces the
// materialize_batch task of the seed flow kafka-compacted-postgres-state
// (parity/seeds/reference/kafka_state_materialize.py) and keeps its tables,
// its lock and every one of its checks.
//
// # What it reads
//
// One topic (Config.Topic) through franz-go with no consumer group and no
// group offsets: an uncached Metadata request for the cluster id, the topic
// id and the partition leaders; DescribeConfigs for the topic's
// cleanup.policy and delete.retention.ms (the tombstone rule below);
// ListOffsets to each leader for the log
// start offset and the last stable offset (read_committed); raw Fetch
// requests (isolation level read_committed, by topic id) to each leader,
// every partition from its saved next offset, decoded by
// kgo.ProcessFetchPartition, which drops records of aborted transactions and
// transaction markers and steps over compacted batch tails. Partitions are
// fetched concurrently and share one budget of Config.MaxRecords records;
// each stops at its end (next offset >= last stable offset), so a fully read
// topic returns at once; Config.PollSeconds bounds the fetching.
//
// # What it writes
//
// Schema kafka_state, created by Setup with the seed's DDL:
//
//	positions(topic PK, cluster_id, topic_id, next_offsets jsonb, updated_at)
//	records(topic, record_key, payload jsonb, deleted, kafka_partition, kafka_offset; PK (topic, record_key))
//	current_values: view of records WHERE NOT deleted
//
// Materialize runs one transaction: SET LOCAL statement_timeout = '90s';
// pg_try_advisory_xact_lock(hashtextextended('kestra-kafka-state:' ||
// topic, 0)), the seed's key, so a seed run and a changesink run exclude
// each other; the positions row FOR UPDATE; COPY of the batch into a
// temporary staging table while it is being fetched; one merge statement
// (MERGE on PostgreSQL 15+, the seed's INSERT ... ON CONFLICT before) that
// applies, per key, only the highest offset and only where it is higher
// than the stored row's (a tombstone sets deleted = true and payload NULL; a
// later value revives the key), and with MERGE also refuses a key stored at
// another partition; a query for keys that moved partitions when the batch
// may hold a key in two partitions, or without MERGE; the positions upsert
// (next_offsets as {"<partition>": <next offset>}; updated_at moves only
// when every partition was read to its end, see below); the live_keys
// count; commit. Only then is batch-report.json written into the working
// directory and the Result returned for the outputs and metrics.
// The report file is created under a hidden temporary name before the
// batch starts, so an unwritable working directory fails the run before
// anything changes; a stop (SIGTERM) after COMMIT was sent waits for the
// commit's answer, and a lost answer is looked up (txid_status), so a run
// reports a committed batch as a failure only when PostgreSQL cannot tell
// within 15 s, and then says it may be committed.
//
// Once kafka_state.records has a page per four staged records, the merge
// (and the moved-key query) look each staged key up in the primary key
// index in key order, with the planner's other join methods, sequential
// scans and materialization off for those statements: it costs a lookup per
// staged key, not a read of the table (see sqlPlanner). The live_keys
// count still reads the topic's rows (the seed's count(*)), the one step
// whose cost grows with the table.
//
// The transaction also sets, for itself only: jit off, work_mem 64MB (the
// per-key sort of a 100,000-record batch stays in memory), temp_buffers 64MB
// (the staging table stays in memory) and default_statistics_target 10 (a light
// ANALYZE of the staged keys); sessions are named "changesink kafka-state"
// in pg_stat_activity unless PG_DSN sets application_name.
//
// Topic ids are stored in the seed's text form (TopicIDText: standard base64
// without padding, 22 characters), so positions written by the seed are
// accepted and the reverse.
//
// # Delivery guarantee
//
// Exactly once into PostgreSQL: a record's value and the position past it
// commit together or not at all, and only a higher offset replaces a stored
// row, so a re-run after any failure (a refusal, a lost connection, a killed
// process) converges to the state of an uninterrupted run. The stored next
// offset is the exact next offset to fetch (Java and franz-go semantics):
// past returned records, aborted transactions, transaction markers and
// compacted tails. The seed stores librdkafka's position() ("last message
// returned + 1", which librdkafka#3917 reports can stop before a trailing
// transaction marker; with librdkafka 2.12.1 the seed was seen storing the
// end offset past a trailing commit marker, TestSeedAndChangesinkTakeTurns).
// Either value is safe to resume from, and each implementation accepts the
// other's.
//
// # Tombstones and delete.retention.ms
//
// Kafka's cleaner keeps a tombstone at least delete.retention.ms after the
// pass that first compacted it, and never cleans past the last stable
// offset; a batch that reads a tombstone's offset only after it was removed
// would leave the key live for ever. positions.updated_at is
// therefore the start of the last batch that read every partition to its
// end (or of the first batch): a batch is refused (ErrTombstonesMayBeLost,
// *TombstoneError) before reading when a partition has records past its
// saved offset and more than delete.retention.ms, less a margin, passed
// since updated_at by PostgreSQL's clock; and after reading, before any
// write, when its reads of a partition ended later than that after
// updated_at (or after the batch's start, for a first run or a partition
// that was at its end). A partition whose saved offset is its end is always
// safe. Topics whose cleanup.policy lacks compact are exempt (and logged):
// they lose tombstones only with whole segments, which moves the log start
// offset (ErrOffsetOutOfRange). The rule and its limits are in
// tombstones.go and the README's runbook.
//
// # Deliberate differences from the seed
//
//   - Next offsets are always the exact next offset to fetch (past a
//     trailing transaction marker or compacted tail), not librdkafka's
//     position() (see above); the two agreed in every case tested.
//   - End of partition is per partition: a partition that reached its last
//     stable offset is not fetched again in the batch, even if records
//     arrive later; the seed keeps polling until every partition is at its
//     end at the same time. A busy topic's batch can therefore end sooner.
//   - Payloads are the record's JSON text as jsonb, so numbers keep every
//     digit (jsonb numeric); the seed round-trips through Python floats
//     (1.10 becomes 1.1, 1e2 becomes 100.0, 1e-400 becomes 0.0).
//   - Values the seed would fail on deep inside psycopg or PostgreSQL (a
//     \u0000 escape, an unpaired surrogate escape, a key with a NUL byte, a
//     number beyond PostgreSQL numeric) are refused up front, naming the
//     record. Numbers the seed rounds to 0.0 but jsonb cannot hold (more than
//     16383 digits after the point, or a zero with an exponent of 1073741823
//     or more) are refused.
//   - KAFKA_PROPERTIES accepts the mapped keys only (an unknown key is a
//     configuration error listing them); the seed passes anything to
//     librdkafka. Keys the seed overrides are accepted and logged.
//   - Bounds and configuration errors exit 2, refusals 1, transient failures
//     3 (the seed: a Python traceback, exit 1); verify names the first
//     offending record and how many there are.
//   - No consumer group id is configured at all (the seed configures a
//     random one and never commits to it).
//   - A held topic lock is waited for (LockWait, 10 s), then reported as
//     transient, naming the holding backend: the holder is another run or a
//     run killed moments ago whose session PostgreSQL has not yet closed, so
//     a retry succeeds (the seed refuses at once). Each batch also sets
//     client_connection_check_interval (PostgreSQL 14+), so a killed run's
//     backend ends within about a second even during a statement.
//   - The tombstone rule above, which the seed does not have; with it,
//     positions.updated_at stays put after a batch that MAX_RECORDS or
//     POLL_SECONDS cut before some partition's end (the seed sets now() on
//     every batch).
//
// # Refusals
//
// Every refusal is a sentinel in errors.go (ErrTopicUnavailable,
// ErrNoIDs, ErrIDsChanged, ErrPartitionsChanged, ErrValuesWithoutPositions,
// ErrBadPositions, ErrOffsetOutOfRange, ErrTombstonesMayBeLost, ErrNullKey,
// ErrKeyNotUTF8, ErrKeyNUL, ErrKeyTooLong, ErrValueNotUTF8,
// ErrValueNotJSON, ErrValueTooLarge, ErrNonFinite, ErrKeyMovedPartitions, ErrTopicChanged,
// ErrAheadOfPositions), marked outcome.Refused (exit 1); it names the
// topic, and the partition, offset and key where they apply, and what to
// do. A held lock (ErrLocked) and lost connections and timeouts are
// outcome.Transient (exit 3); bounds, KAFKA_PROPERTIES, PostgreSQL
// set-up errors and a TOPIC that names no topic any batch read (or one read
// on another cluster) are outcome.Config (exit 2). In every failure case nothing is committed,
// except a connection lost after COMMIT was sent whose transaction's fate
// PostgreSQL cannot tell within 15 s (txid_status on a new connection):
// transient, the message says the outcome is unknown (or that the COMMIT
// waits for a synchronous standby, committed once one confirms it), and a
// re-run converges either way. When PostgreSQL answers, committed is a success
// and aborted a transient failure that committed nothing. The seed rule each check keeps, and the tests that hold it,
// are listed in docs/seed-rules.md.
package kafkastate
