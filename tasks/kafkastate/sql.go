package kafkastate

import "strconv"

// The SQL of kafka-state, next to the code that runs it. Table, view and
// column names, the lock key and the positions upsert are the seed's, so a
// database the seed flow wrote keeps working and a seed run and a changesink
// run exclude each other.

// ddl is the seed's create_state_tables task, verbatim (one statement per
// element, so each can be retried).
var ddl = []string{
	`CREATE SCHEMA IF NOT EXISTS kafka_state`,
	`CREATE TABLE IF NOT EXISTS kafka_state.positions (
  topic text PRIMARY KEY,
  cluster_id text NOT NULL,
  topic_id text NOT NULL,
  next_offsets jsonb NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now()
)`,
	`CREATE TABLE IF NOT EXISTS kafka_state.records (
  topic text NOT NULL,
  record_key text NOT NULL,
  payload jsonb,
  deleted boolean NOT NULL,
  kafka_partition integer NOT NULL,
  kafka_offset bigint NOT NULL CHECK (kafka_offset >= 0),
  PRIMARY KEY (topic, record_key),
  CHECK (deleted = (payload IS NULL))
)`,
	`CREATE OR REPLACE VIEW kafka_state.current_values AS
SELECT topic, record_key, payload
FROM kafka_state.records WHERE NOT deleted`,
}

// setupLockKey serialises changesink setups (the seed's DDL has no lock;
// setup also retries the catalog races a concurrent seed run can cause).
const setupLockKey = "changesink-kafka-state:setup"

const sqlSetupLock = `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`

// TopicLockKey returns the seed's advisory lock key for topic
// ("kestra-kafka-state:" + topic), taken as
// pg_try_advisory_xact_lock(hashtextextended(key, 0)) by every batch, so a
// seed run and a changesink run exclude each other. Others that change the
// topic's rows take it too.
func TopicLockKey(topic string) string { return "kestra-kafka-state:" + topic }

// sqlStatementTimeout is the seed's "SET LOCAL statement_timeout = '90s'".
const sqlStatementTimeout = `SET LOCAL statement_timeout = '90s'`

// sqlWorkMem lets the merge sort a 100,000-record batch in memory.
const sqlWorkMem = `SET LOCAL work_mem = '64MB'`

// sqlTempBuffers keeps the staging table (about 25 MB for 100,000 records
// of 200 bytes) in the session's local buffers instead of spilling it to
// disk (default 8 MB). It must run before the session's first temporary
// table, which the staging table is.
const sqlTempBuffers = `SET LOCAL temp_buffers = '64MB'`

// sqlLock is the seed's per-topic lock: $1 = 'kestra-kafka-state:' || topic.
const sqlLock = `SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))`

// sqlLockHolder names the session holding the topic lock ($1 as in sqlLock):
// an int8 advisory key is stored as classid (high 32 bits) and objid (low),
// objsubid 1. Empty when the holder let go meanwhile. clock_timestamp(), not
// now(): the asking transaction began before its wait.
const sqlLockHolder = `SELECT a.pid, coalesce(a.application_name, ''), coalesce(a.state, ''),
       coalesce(a.wait_event_type, ''), coalesce(a.wait_event, ''), coalesce(host(a.client_addr), 'local socket'),
       coalesce(extract(epoch FROM clock_timestamp() - a.xact_start), 0)::float8
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted
  AND ((l.classid::int8 << 32) | l.objid::int8) = hashtextextended($1, 0)
  AND ($2 = '' OR l.mode = $2)
ORDER BY a.xact_start
LIMIT 1`

// sqlConnectionCheck makes PostgreSQL (14+) check every second, while it
// runs one of this session's statements, that the client is still there: a
// killed run's backend then ends (and frees the topic lock) within about a
// second instead of after its statement. A no-op before PostgreSQL 14.
const sqlConnectionCheck = `SELECT set_config(name, '1000', true) FROM pg_settings WHERE name = 'client_connection_check_interval'`

// sqlReadPositions is the seed's positions read, locking the row.
const sqlReadPositions = `SELECT next_offsets, cluster_id, topic_id FROM kafka_state.positions WHERE topic = $1 FOR UPDATE`

// sqlAnyRecord is the seed's "values exist without read positions" probe.
const sqlAnyRecord = `SELECT 1 FROM kafka_state.records WHERE topic = $1 LIMIT 1`

// stagingTable receives the batch by COPY; it lives until the commit.
const stagingTable = "kafka_state_staging"

const sqlCreateStaging = `CREATE TEMP TABLE ` + stagingTable + ` (
  record_key text NOT NULL,
  payload jsonb,
  kafka_partition integer NOT NULL,
  kafka_offset bigint NOT NULL
) ON COMMIT DROP`

// stagingColumns is the COPY column order of rowSource.Values.
var stagingColumns = []string{"record_key", "payload", "kafka_partition", "kafka_offset"}

// sqlAnalyzeStaging gives the planner the staging table's row count and
// key distribution (a never-analyzed temporary table is estimated at 200
// distinct keys, which turns the moved-key check into 100,000 index probes).
// Only record_key, sampled lightly (see sqlStatisticsTarget): about 10 ms.
const sqlAnalyzeStaging = `ANALYZE pg_temp.` + stagingTable + ` (record_key)`

// sqlStatisticsTarget makes that ANALYZE sample 3,000 rows instead of 30,000.
const sqlStatisticsTarget = `SET LOCAL default_statistics_target = 10`

// sqlMovedKey is the seed's "A key moved partitions" check for the whole
// batch in one query: a key read from two partitions in this batch, or read
// from another partition than its stored row. It returns at most one key,
// with one occurrence (partition, offset) and the other (partition, offset,
// stored). $1 = topic. With MERGE it runs only when the batch may hold a key
// in two partitions (see keysInTwoPartitions) or the merge found a stored
// row at another partition; the merge checks stored rows itself.
const sqlMovedKey = `WITH batch AS (
  SELECT record_key, min(kafka_partition) AS lo, max(kafka_partition) AS hi
  FROM pg_temp.` + stagingTable + `
  GROUP BY record_key
), moved AS (
  SELECT b.record_key, b.lo, b.hi, r.kafka_partition AS stored_partition, r.kafka_offset AS stored_offset
  FROM batch b
  LEFT JOIN kafka_state.records r ON r.topic = $1 AND r.record_key = b.record_key
  WHERE b.lo <> b.hi OR r.kafka_partition <> b.lo
  LIMIT 1
)
SELECT m.record_key,
  CASE WHEN m.lo <> m.hi THEN m.hi ELSE m.lo END,
  (SELECT max(s.kafka_offset) FROM pg_temp.` + stagingTable + ` s
    WHERE s.record_key = m.record_key AND s.kafka_partition = CASE WHEN m.lo <> m.hi THEN m.hi ELSE m.lo END),
  CASE WHEN m.lo <> m.hi THEN m.lo ELSE m.stored_partition END,
  CASE WHEN m.lo <> m.hi THEN (SELECT max(s.kafka_offset) FROM pg_temp.` + stagingTable + ` s
    WHERE s.record_key = m.record_key AND s.kafka_partition = m.lo) ELSE m.stored_offset END,
  m.lo = m.hi
FROM moved m`

// sqlNoJIT keeps JIT compilation off for the transaction: the merge of a
// batch into a large table costs the planner more than jit_above_cost, and
// compiling it took 0.25 s before every such statement.
const sqlNoJIT = `SET LOCAL jit = off`

// sqlRecordsPages is the size of kafka_state.records in pages, which
// decides how the merge finds stored rows (see sqlPlanner).
const sqlRecordsPages = `SELECT pg_relation_size('kafka_state.records') / current_setting('block_size')::bigint`

// sqlPlanner makes the moved-key query and the merge look every staged key
// up in the records' primary key index (the source sorted by key, so the
// lookups walk the index in order), however large the table and however
// stale its statistics. materialize sets it once the table has at least a
// page per four staged records: below that, reading the whole table into a
// hash join is as fast and the planner picks it (into an empty table it
// saves the sort); above it, it is what does not scale: a 100,000-record
// merge into 10M stored keys took 22 s that way and 3 s by index. With only
// hash and merge joins off, a table that had grown from 1 to 50,000 rows
// since its last ANALYZE was scanned once per staged key (74 s), so
// sequential scans and materialized inner sides are off too, for these two
// statements only: sqlPlannerReset follows them (the live-keys count wants
// its sequential scan).
const sqlPlanner = `SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off; ` +
	`SET LOCAL enable_seqscan = off; SET LOCAL enable_material = off`

// sqlPlannerReset gives the planner back its choices after the merge.
const sqlPlannerReset = `SET LOCAL enable_hashjoin = DEFAULT; SET LOCAL enable_mergejoin = DEFAULT; ` +
	`SET LOCAL enable_seqscan = DEFAULT; SET LOCAL enable_material = DEFAULT`

// mergeSQL returns the one statement that applies the staged batch to
// kafka_state.records: per key only the highest offset, and only where it is
// higher than the stored row's (the seed's upsert and its WHERE
// r.kafka_offset < EXCLUDED.kafka_offset). A NULL payload is a tombstone:
// deleted = true. $1 = topic.
//
// useMerge picks PostgreSQL 15's MERGE (a join and plain inserts; measured
// 25-40 % faster than INSERT ... ON CONFLICT on a 100,000-record batch);
// without it (PostgreSQL 11-14) the seed's INSERT ... ON CONFLICT is used.
// Both need one source row per key: dedupe keeps the highest offset per key
// with DISTINCT ON, which is skipped when the batch is known to hold each key
// once. sorted orders the source by key, so the index lookups of sqlPlanner
// and the inserts walk the index in order (the dedupe source is sorted
// anyway). Concurrent writers are excluded by the
// topic's advisory lock; a writer that ignores it makes MERGE fail with a
// unique violation, and nothing is committed.
//
// MERGE also applies the seed's moved-key rule to stored rows, in the same
// lookups: its first clause matches a key stored at another partition and
// sets the primary key column record_key to NULL, so the statement fails
// with not_null_violation (23502) on record_key, which no other clause can
// raise; materialize then runs sqlMovedKey for the refusal's details.
func mergeSQL(useMerge, dedupe, sorted bool) string {
	source := `pg_temp.` + stagingTable
	if sorted {
		source = `(
  SELECT record_key, payload, kafka_partition, kafka_offset
  FROM pg_temp.` + stagingTable + `
  ORDER BY record_key
)`
	}
	if dedupe {
		source = `(
  SELECT DISTINCT ON (record_key) record_key, payload, kafka_partition, kafka_offset
  FROM pg_temp.` + stagingTable + `
  ORDER BY record_key, kafka_offset DESC
)`
	}
	if useMerge {
		return `MERGE INTO kafka_state.records AS r
USING ` + source + ` AS s
ON r.topic = $1 AND r.record_key = s.record_key
WHEN MATCHED AND r.kafka_partition <> s.kafka_partition THEN UPDATE SET record_key = NULL
WHEN MATCHED AND r.kafka_offset < s.kafka_offset THEN UPDATE SET
  payload = s.payload, deleted = s.payload IS NULL, kafka_offset = s.kafka_offset
WHEN NOT MATCHED THEN INSERT (topic, record_key, payload, deleted, kafka_partition, kafka_offset)
  VALUES ($1, s.record_key, s.payload, s.payload IS NULL, s.kafka_partition, s.kafka_offset)`
	}
	return `INSERT INTO kafka_state.records AS r
  (topic, record_key, payload, deleted, kafka_partition, kafka_offset)
SELECT $1, s.record_key, s.payload, s.payload IS NULL, s.kafka_partition, s.kafka_offset
FROM ` + source + ` AS s
ON CONFLICT (topic, record_key) DO UPDATE SET
  payload = EXCLUDED.payload, deleted = EXCLUDED.deleted,
  kafka_offset = EXCLUDED.kafka_offset
WHERE r.kafka_offset < EXCLUDED.kafka_offset`
}

// sqlWritePositions is the seed's positions upsert, except that updated_at
// moves only when $5 is true: the batch read every partition to its end
// (see the tombstone rule in tombstones.go; a new row gets now() either
// way). $4 is the JSON object {"<partition>": <next offset>}.
const sqlWritePositions = `INSERT INTO kafka_state.positions (topic, cluster_id, topic_id, next_offsets)
VALUES ($1, $2, $3, $4::jsonb)
ON CONFLICT (topic) DO UPDATE SET
  next_offsets = EXCLUDED.next_offsets,
  updated_at = CASE WHEN $5::boolean THEN now() ELSE kafka_state.positions.updated_at END`

// sqlPositionsClock reads the saved positions' updated_at and PostgreSQL's
// clock now, so the time between them is measured on one clock. $1 = topic.
const sqlPositionsClock = `SELECT updated_at, clock_timestamp() FROM kafka_state.positions WHERE topic = $1`

// sqlSavedTopic reads when topic $1's positions were saved and for which
// cluster, without a lock (for a topic the broker does not know).
const sqlSavedTopic = `SELECT updated_at, cluster_id FROM kafka_state.positions WHERE topic = $1`

// sqlTxID assigns and reads the batch transaction's id (epoch-extended,
// PostgreSQL 10+), its backend's pid and its start, so that a COMMIT whose
// answer is lost can be looked up with sqlTxStatus on a new connection.
const sqlTxID = `SELECT txid_current(), pg_backend_pid(), now()`

// sqlTxStatus is what became of transaction $1: committed, aborted or in
// progress (NULL when it is too old to tell). PostgreSQL's documentation of
// txid_status names this use: finding out whether a transaction committed
// after the connection was lost while its COMMIT was in progress.
const sqlTxStatus = `SELECT txid_status($1)`

// sqlPositionsAre reports whether topic $1's positions row holds next
// offsets $2 (JSON: the batch's partitions, every one of a whole-topic
// batch), cluster id $3 and topic id $4: what a batch wrote.
const sqlPositionsAre = `SELECT next_offsets @> $2::jsonb AND cluster_id = $3 AND topic_id = $4 FROM kafka_state.positions WHERE topic = $1`

// sqlEndIdleBackend ends backend $1 if it is idle inside transaction $2
// (txid_current's 64-bit form; backend_xid is its low 32 bits), started at
// $3: a batch whose COMMIT never reached its backend. It returns no row
// otherwise. The start rules out another transaction given the same xid
// and pid (a server promoted after a failover).
const sqlEndIdleBackend = `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
WHERE pid = $1 AND state = 'idle in transaction' AND backend_xid::text = ($2::bigint % 4294967296)::text AND xact_start = $3`

// sqlBackendActivity is what backend $1, inside transaction $2 started at
// $3 (as in sqlEndIdleBackend), is doing: its state, wait event type and
// wait event (empty when it waits for nothing). No row once the transaction
// has ended.
const sqlBackendActivity = `SELECT coalesce(state, ''), coalesce(wait_event_type, ''), coalesce(wait_event, '') FROM pg_stat_activity
WHERE pid = $1 AND backend_xid::text = ($2::bigint % 4294967296)::text AND xact_start = $3`

// sqlSyncStandbys is the synchronous standbys this session's COMMIT waits
// for: synchronous_standby_names when synchronous_commit is on,
// remote_write or remote_apply, else empty.
const sqlSyncStandbys = `SELECT CASE WHEN current_setting('synchronous_commit') IN ('on', 'remote_write', 'remote_apply')
  THEN current_setting('synchronous_standby_names') ELSE '' END`

// sqlLiveKeys is the seed's live_keys count.
const sqlLiveKeys = `SELECT count(*) FROM kafka_state.current_values WHERE topic = $1`

// sqlVerify is the seed's check_saved_positions condition, returning the
// first offending record (by partition and offset) and how many there are
// instead of one boolean. $1 = topic.
const sqlVerify = `SELECT r.record_key, r.kafka_partition, r.kafka_offset,
  CASE WHEN p.topic IS NULL OR NOT jsonb_exists(p.next_offsets, CAST(r.kafka_partition AS text)) THEN NULL
    ELSE CAST(p.next_offsets ->> CAST(r.kafka_partition AS text) AS bigint) END,
  count(*) OVER ()
FROM kafka_state.records r
LEFT JOIN kafka_state.positions p ON p.topic = r.topic
WHERE r.topic = $1 AND (p.topic IS NULL
  OR NOT jsonb_exists(p.next_offsets, CAST(r.kafka_partition AS text))
  OR CAST(p.next_offsets ->> CAST(r.kafka_partition AS text) AS bigint) <= r.kafka_offset)
ORDER BY r.kafka_partition, r.kafka_offset
LIMIT 1`

// sqlSavedOffsets reads a topic's next_offsets for verify's check of its
// form ($1 topic).
const sqlSavedOffsets = `SELECT next_offsets FROM kafka_state.positions WHERE topic = $1`

// sqlHasPositions tells whether a topic has a positions row ($1 topic).
const sqlHasPositions = `SELECT EXISTS (SELECT 1 FROM kafka_state.positions WHERE topic = $1)`

// shardsDDL is changesink's own table beside the seed's (Setup creates it
// after ddl): per partition of a topic, the shard that claims it (NULL:
// none) and caught_up_at, the start of the last batch that read the
// partition to its end as part of a shard read to its end (the tombstone
// rule's anchor for a shard, as positions.updated_at is for the whole
// topic). Whole-topic runs and the seed's script do not need it.
var shardsDDL = `CREATE TABLE IF NOT EXISTS kafka_state.shards (
  topic text NOT NULL,
  kafka_partition integer NOT NULL,
  shard text,
  caught_up_at timestamptz,
  PRIMARY KEY (topic, kafka_partition)
)`

// PartitionLockKey returns the advisory lock key of one partition of topic
// ("kestra-kafka-state:" + topic + ":" + partition; a topic name has no
// ':'), which a shard run takes for each of its partitions.
func PartitionLockKey(topic string, partition int32) string {
	return TopicLockKey(topic) + ":" + strconv.Itoa(int(partition))
}

// sqlLockShared is the topic lock in shared mode, which shard runs take:
// they exclude the seed's and whole-topic runs' exclusive lock, not each
// other.
const sqlLockShared = `SELECT pg_try_advisory_xact_lock_shared(hashtextextended($1, 0))`

// sqlClaimLock serialises the shard claims of topic $1 (a transaction of
// its own, before the batch).
const sqlClaimLock = `SELECT pg_advisory_xact_lock(hashtextextended('changesink-kafka-state-shards:' || $1, 0))`

// sqlOtherClaim is the first of partitions $2 of topic $1 that another
// shard than $3 claims.
const sqlOtherClaim = `SELECT kafka_partition, shard FROM kafka_state.shards
WHERE topic = $1 AND kafka_partition = ANY($2::int[]) AND shard IS NOT NULL AND shard <> $3
ORDER BY kafka_partition LIMIT 1`

// sqlClaim claims partitions $2 of topic $1 for shard $3 (those no shard
// claims; sqlOtherClaim found none claimed by another).
const sqlClaim = `INSERT INTO kafka_state.shards AS s (topic, kafka_partition, shard)
SELECT $1, p, $3 FROM unnest($2::int[]) AS p
ON CONFLICT (topic, kafka_partition) DO UPDATE SET shard = EXCLUDED.shard
WHERE s.shard IS DISTINCT FROM EXCLUDED.shard`

// sqlReadPositionsShared is the positions read of a shard run: without FOR
// UPDATE, which would make the shards wait for each other's batches (each
// writes only its own partitions' entries, under their locks).
const sqlReadPositionsShared = `SELECT next_offsets, cluster_id, topic_id FROM kafka_state.positions WHERE topic = $1`

// sqlRecordsWithoutPositions is the seed's probe for a shard run that found
// no positions row, in one snapshot: records of topic $1 and still no
// positions row (another shard's first batch may have committed both since).
const sqlRecordsWithoutPositions = `SELECT EXISTS (SELECT 1 FROM kafka_state.records WHERE topic = $1),
  EXISTS (SELECT 1 FROM kafka_state.positions WHERE topic = $1)`

// sqlHasShards tells whether kafka_state.shards exists (a database the
// seed's DDL made has no such table).
const sqlHasShards = `SELECT to_regclass('kafka_state.shards') IS NOT NULL`

// sqlCaughtUp reads, for partitions $2 of topic $1, when a shard last read
// each to its end (absent or NULL: never).
const sqlCaughtUp = `SELECT kafka_partition, caught_up_at FROM kafka_state.shards
WHERE topic = $1 AND kafka_partition = ANY($2::int[]) AND caught_up_at IS NOT NULL`

// sqlPartitionsWithoutLiveValues is which of partitions $2 of topic $1
// kafka_state.records holds no live value of (the tombstone rule's
// exemption: plan).
const sqlPartitionsWithoutLiveValues = `SELECT p FROM unnest($2::int[]) AS p
WHERE NOT EXISTS (SELECT 1 FROM kafka_state.records r WHERE r.topic = $1 AND r.kafka_partition = p AND NOT r.deleted)`

// sqlWriteShardPositions is a shard's positions write: a first row gets
// every partition ($4: the shard's next offsets and the others' log start
// offsets, where the seed would start them), an existing one only the
// shard's entries ($5), merged into it; updated_at stays (it is the whole
// topic's anchor).
const sqlWriteShardPositions = `INSERT INTO kafka_state.positions AS p (topic, cluster_id, topic_id, next_offsets)
VALUES ($1, $2, $3, $4::jsonb)
ON CONFLICT (topic) DO UPDATE SET next_offsets = p.next_offsets || $5::jsonb`

// sqlShardCaughtUp records that the batch read partitions $2 of topic $1 to
// their end: caught_up_at is the batch transaction's start.
const sqlShardCaughtUp = `UPDATE kafka_state.shards SET caught_up_at = now() WHERE topic = $1 AND kafka_partition = ANY($2::int[])`

// rejectedDDL is changesink's table of the records ON_BAD_RECORD=reject
// kept aside (Setup creates it after shardsDDL): per record, where it is
// in the topic, its key and value bytes as read (NULL: a null key, a
// tombstone), the rule it broke and when the batch that kept it began. Its
// primary key is the record's place, so a replay never adds a row twice.
var rejectedDDL = `CREATE TABLE IF NOT EXISTS kafka_state.rejected (
  topic text NOT NULL,
  kafka_partition integer NOT NULL,
  kafka_offset bigint NOT NULL,
  record_key bytea,
  record_value bytea,
  error text NOT NULL,
  rejected_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (topic, kafka_partition, kafka_offset)
)`

// sqlHasRejected tells whether kafka_state.rejected exists (a database
// the seed's DDL or an older changesink made has no such table).
const sqlHasRejected = `SELECT to_regclass('kafka_state.rejected') IS NOT NULL`

// sqlWriteRejected keeps records of topic $1 aside: $2 partitions, $3
// offsets, $4 keys, $5 values, $6 errors, one element per record. A record
// already kept (a batch replayed after a failure or a rebuild) keeps its
// row, rejected_at included; another record at the same place (the topic
// deleted and created again, then rebuilt) replaces it.
const sqlWriteRejected = `INSERT INTO kafka_state.rejected AS x (topic, kafka_partition, kafka_offset, record_key, record_value, error)
SELECT $1, p, o, k, v, e FROM unnest($2::int[], $3::bigint[], $4::bytea[], $5::bytea[], $6::text[]) AS r(p, o, k, v, e)
ON CONFLICT (topic, kafka_partition, kafka_offset) DO UPDATE
SET record_key = EXCLUDED.record_key, record_value = EXCLUDED.record_value, error = EXCLUDED.error, rejected_at = EXCLUDED.rejected_at
WHERE (x.record_key, x.record_value, x.error) IS DISTINCT FROM (EXCLUDED.record_key, EXCLUDED.record_value, EXCLUDED.error)`

// sqlCountRejected counts the rows kafka_state.rejected holds for topic $1.
const sqlCountRejected = `SELECT count(*) FROM kafka_state.rejected WHERE topic = $1`

// sqlCheckSchema is kafka-state check's look at the schema: whether setup
// made kafka_state's positions and records, and whether the role may
// create the schema (CREATE on the database).
const sqlCheckSchema = `SELECT to_regclass('kafka_state.positions') IS NOT NULL AND to_regclass('kafka_state.records') IS NOT NULL,
  has_database_privilege(current_database(), 'CREATE')`

// sqlCheckPrivileges lists the privileges a batch uses that the role
// lacks, one row each (a table that does not exist is not listed:
// kafka_state.shards and kafka_state.rejected are newer than the seed's
// DDL). A privilege string of several would be true if any one were held:
// one each.
const sqlCheckPrivileges = `SELECT p.what FROM (VALUES
  ('TEMPORARY on the database (the staging table)', has_database_privilege(current_database(), 'TEMPORARY')),
  ('USAGE on schema kafka_state', has_schema_privilege(to_regnamespace('kafka_state'), 'USAGE')),
  ('SELECT on kafka_state.positions', has_table_privilege(to_regclass('kafka_state.positions'), 'SELECT')),
  ('INSERT on kafka_state.positions', has_table_privilege(to_regclass('kafka_state.positions'), 'INSERT')),
  ('UPDATE on kafka_state.positions', has_table_privilege(to_regclass('kafka_state.positions'), 'UPDATE')),
  ('SELECT on kafka_state.records', has_table_privilege(to_regclass('kafka_state.records'), 'SELECT')),
  ('INSERT on kafka_state.records', has_table_privilege(to_regclass('kafka_state.records'), 'INSERT')),
  ('UPDATE on kafka_state.records', has_table_privilege(to_regclass('kafka_state.records'), 'UPDATE')),
  ('SELECT on kafka_state.current_values', has_table_privilege(to_regclass('kafka_state.current_values'), 'SELECT')),
  ('SELECT on kafka_state.shards', has_table_privilege(to_regclass('kafka_state.shards'), 'SELECT')),
  ('INSERT on kafka_state.shards', has_table_privilege(to_regclass('kafka_state.shards'), 'INSERT')),
  ('UPDATE on kafka_state.shards', has_table_privilege(to_regclass('kafka_state.shards'), 'UPDATE')),
  ('SELECT on kafka_state.rejected', has_table_privilege(to_regclass('kafka_state.rejected'), 'SELECT')),
  ('INSERT on kafka_state.rejected', has_table_privilege(to_regclass('kafka_state.rejected'), 'INSERT'))
) AS p(what, ok) WHERE p.ok IS FALSE`

// sqlCheckLockTimeout bounds kafka-state check's wait for the positions
// row a running batch holds.
const sqlCheckLockTimeout = `SET LOCAL lock_timeout = '3s'`
