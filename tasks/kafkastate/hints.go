package kafkastate

import "errors"

// Hint returns what to do about err, a failure of Setup, Materialize or
// Verify: the remedy of the most specific cause err wraps, or "" when it
// has none (a PostgreSQL or Kafka failure whose message says it itself).
// The CLI prints it apart from the error (a "hint:" line and the hint
// output); docs/runbook.md has a section for each, holding the same text.
func Hint(err error) string {
	for _, h := range hints() {
		if errors.Is(err, h.err) {
			return h.text
		}
	}
	return ""
}

// hint is the remedy of one cause.
type hint struct {
	err  error
	text string
}

// The remedies several causes share.
const (
	rebuild = "Rebuild into an empty destination: delete the topic's rows from kafka_state.records and " +
		"kafka_state.positions, then re-run until caught up."
	badRecord = "Fix the producer; publish a corrected value or a tombstone for the key, and re-run once compaction " +
		"has removed the bad record (the whole batch was rolled back; see \"A refused record blocks the topic\")."
)

// hints is the table Hint reads, narrower causes before the errors they
// narrow.
func hints() []hint {
	return []hint{
		{ErrTopicUnavailable, "Check TOPIC, that the topic exists (topics are never created automatically) and the client's " +
			"ACLs. Read on another cluster: fix bootstrap.servers in KAFKA_PROPERTIES (or PG_DSN). Deleted after a batch " +
			"read it: restore it, or once it exists again rebuild into an empty destination (delete the topic's rows from " +
			"kafka_state.records and kafka_state.positions)."},
		{ErrNoIDs, "Use Kafka 2.8 or newer."},
		{ErrIDsChanged, rebuild},
		{ErrPartitionsChanged, rebuild},
		{ErrValuesWithoutPositions, "Restore kafka_state.records and kafka_state.positions together from one backup, or " +
			"delete the topic's records to rebuild."},
		{ErrBadPositions, "Restore kafka_state.positions from a backup."},
		{ErrOffsetPastEnd, "The saved offset is past the end of the log, which no deletion explains: the positions come " +
			"from another topic of this name (deleted and created again) or were edited. " + rebuild},
		{ErrOffsetOutOfRange, "Records were deleted before they were materialized (retention, DeleteRecords, an unclean " +
			"leader election), or the positions come from another topic. " + rebuild},
		{ErrTombstonesMayBeLost, rebuild + " Read within delete.retention.ms. To prevent it, raise the topic's " +
			"delete.retention.ms above the longest time between batches (a catch-up included) and run batches more often " +
			"(drain mode); raising it now does not bring back a removed tombstone."},
		{ErrNullKey, "Check the topic's cleanup.policy (compacted topics reject keyless records) and the producer; the " +
			"whole batch was rolled back."},
		{ErrKeyNotUTF8, "Keys are stored as PostgreSQL text: have the producer send keys as UTF-8 text (a binary key, " +
			"such as a UUID or an integer in bytes, as its hex or decimal text). Such a key cannot be stored, not even as " +
			"a tombstone: publish a tombstone with the bad key's bytes and re-run once compaction has removed the record " +
			"and, after delete.retention.ms, the tombstone (the whole batch was rolled back)."},
		{ErrKeyNUL, "PostgreSQL text cannot hold a NUL byte: fix the producer's keys. Such a key cannot be stored, not " +
			"even as a tombstone: publish a tombstone with the bad key's bytes and re-run once compaction has removed the " +
			"record and, after delete.retention.ms, the tombstone (the whole batch was rolled back)."},
		{ErrKeyTooLong, "Fix the producer. Such a key cannot be stored, not even as a tombstone: publish a tombstone for " +
			"it and re-run once compaction has removed the record and, after delete.retention.ms, the tombstone."},
		{ErrValueNotUTF8, badRecord},
		{ErrValueNotJSON, badRecord},
		{ErrValueTooLarge, "Fix the producer; publish a smaller value or a tombstone for the key, and re-run once " +
			"compaction has removed the bad record (the whole batch was rolled back)."},
		{ErrNonFinite, badRecord},
		{ErrKeyMovedPartitions, "The producer's partitioner or the topic's partition count changed: there is no " +
			"cross-partition offset order. " + rebuild},
		{ErrTopicChanged, "Re-run; if the topic was deleted and recreated, rebuild into an empty destination."},
		{ErrShardOverlap, "Two shard layouts read the topic (SHARD i/n with another n, or another flow): run one " +
			"layout. After changing the layout, release the old claims (positions and clocks stay): UPDATE kafka_state.shards " +
			"SET shard = NULL WHERE topic = '<topic>'."},
		{ErrEmptyShard, "Shard i of n reads the partitions p with p mod n = i: a topic with fewer than n partitions leaves " +
			"the shards i >= its partition count with nothing to read. Set the flow's shards (n) to at most the topic's " +
			"partition count; the shards that ran claimed their partitions, so release those claims first: UPDATE " +
			"kafka_state.shards SET shard = NULL WHERE topic = '<topic>'."},
		{ErrAheadOfPositions, "Look for external writes to the kafka_state tables or a partial restore; restore both " +
			"tables from one backup."},
		{ErrLocked, "Another run of the topic is in progress (changesink or the seed flow's script), or a killed run's " +
			"session PostgreSQL has not closed yet. Retry: a task retry in the flow does it (a re-run of a failed run " +
			"converges). If the backend the message names belongs to no live run, end it: SELECT pg_terminate_backend(<pid>). " +
			"If its COMMIT waits for a synchronous standby, bring the standby back (pg_stat_replication) or change " +
			"synchronous_standby_names: ending or cancelling that backend commits its batch on this server alone."},
	}
}
