package kafkastate

import "errors"

// Hint returns what to do about err, a failure of Setup, Materialize or
// Verify: the remedy of the most specific cause err wraps (a sentinel of
// errors.go, which the typed errors unwrap to), or "" when it has none.
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
		"has removed the bad record (the whole batch was rolled back; see \"A refused record blocks the topic\", " +
		"and ON_BAD_RECORD=reject to keep such records aside)."
)

// hints is the table Hint reads, narrower causes before the errors they
// narrow: a stop first (whatever the step it ended says), the refusals, the
// transient and configuration causes, and last ErrNothingCommitted, which
// only says what a failure before COMMIT left.
func hints() []hint {
	return []hint{
		// Before the problems it wraps: several at once.
		{ErrCheckFailed, "Fix each problem the message numbers (the check's problems output has the remedy of each), " +
			"then run kafka-state check again; nothing was changed."},
		{ErrStopped, "Re-run: nothing was committed, and the next batch resumes from the saved positions."},
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
		{ErrReadsTooSlow, "Raise the topic's delete.retention.ms above the time one batch's reads take, or lower MAX_RECORDS " +
			"and POLL_SECONDS, then re-run: nothing was committed."},
		{ErrTombstonesMayBeLost, rebuild + " Read within delete.retention.ms. To prevent it, raise the topic's " +
			"delete.retention.ms above the longest time between batches (a catch-up included) and run batches more often " +
			"(drain mode); raising it now does not bring back a removed tombstone."},
		{ErrNullKey, "Check the topic's cleanup.policy (compacted topics reject keyless records) and the producer; the " +
			"whole batch was rolled back (ON_BAD_RECORD=reject keeps such records aside)."},
		{ErrKeyNotUTF8, "Keys are stored as PostgreSQL text: have the producer send keys as UTF-8 text (a binary key, " +
			"such as a UUID or an integer in bytes, as its hex or decimal text). Such a key cannot be stored, not even as " +
			"a tombstone: publish a tombstone with the bad key's bytes and re-run once compaction has removed the record " +
			"and, after delete.retention.ms, the tombstone (the whole batch was rolled back; " +
			"ON_BAD_RECORD=reject keeps such records aside)."},
		{ErrKeyNUL, "PostgreSQL text cannot hold a NUL byte: fix the producer's keys. Such a key cannot be stored, not " +
			"even as a tombstone: publish a tombstone with the bad key's bytes and re-run once compaction has removed the " +
			"record and, after delete.retention.ms, the tombstone (the whole batch was rolled back; " +
			"ON_BAD_RECORD=reject keeps such records aside)."},
		{ErrKeyTooLong, "Fix the producer. Such a key cannot be stored, not even as a tombstone: publish a tombstone for " +
			"it and re-run once compaction has removed the record and, after delete.retention.ms, the tombstone."},
		{ErrValueNotUTF8, badRecord},
		{ErrValueNotJSON, badRecord},
		{ErrValueTooLarge, "Fix the producer; publish a smaller value or a tombstone for the key, and re-run once " +
			"compaction has removed the bad record (the whole batch was rolled back)."},
		{ErrNonFinite, badRecord},
		{ErrKeyMovedPartitions, "The producer's partitioner or the topic's partition count changed: there is no " +
			"cross-partition offset order. " + rebuild},
		{ErrTopicChanged, "Re-run (nothing was committed); if the topic was deleted and recreated, rebuild into an empty destination."},
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
		{ErrCommitWaitsForStandby, "The batch is written on this server but not committed for other sessions until a standby " +
			"named in synchronous_standby_names confirms it (pg_stat_replication lists the standbys connected); until then runs " +
			"of this topic wait for its lock. Bring the standby back or change synchronous_standby_names, then re-run: the next " +
			"batch resumes from whatever positions were committed (batch-report.json was not written). " +
			"SELECT pg_cancel_backend(<pid>) ends the wait but keeps the commit on this server only."},
		{ErrCommitInDoubt, "Re-run: the next batch resumes from whatever positions were committed, and the state converges " +
			"either way (batch-report.json was not written). While the batch's backend holds its transaction, runs wait for " +
			"the topic's lock: if pg_stat_activity shows the pid the message names idle in transaction with the backend_xid it " +
			"names, SELECT pg_terminate_backend(<pid>) ends it uncommitted. Positions that do not show a batch txid_status " +
			"calls committed: another run committed newer ones since, or another server answered after a failover that lost it."},
		{ErrSetupInDoubt, "Setup is idempotent: re-run it. A COMMIT left without an answer for 100 s most often waits for a " +
			"synchronous standby (pg_stat_activity wait event SyncRep): check pg_stat_replication and synchronous_standby_names."},
		{ErrReportNotWritten, "Free space in WORKING_DIR and re-run: nothing was committed."},
		{ErrReportNotPublished, "Re-run: a re-run converges (it commits nothing twice, and reports the records after this batch)."},
		{ErrWorkingDir, "Use a writable working directory (WORKING_DIR, else the current directory): nothing was done."},
		{ErrPGLogin, "Check PG_DSN, PGUSER and PGPASSWORD: the user, its password and the database name."},
		{ErrPGNoTLS, "Enable ssl on the server, or point PG_DSN at one that offers TLS; sslmode=disable or prefer only on a " +
			"network you trust."},
		{ErrPGTLS, "With sslmode=verify-ca or verify-full, sslrootcert in PG_DSN must name a file holding the CA that signed " +
			"the server's certificate (or sslrootcert=system for the system trust store), and with verify-full the host in " +
			"PG_DSN must be a name the certificate holds."},
		{ErrPGUnreachable, "Retry once PostgreSQL answers (a task retry in the flow does it): nothing was written. If it " +
			"persists, check that the server is up at the host and port PG_DSN names."},
		{ErrPGStatementTimeout, "Retry: nothing was committed. The statement most often waited for a lock another session " +
			"holds on kafka_state rows, such as a hand edit left in an open transaction: find it in pg_locks and " +
			"pg_stat_activity and end it; else the server is overloaded (statement_timeout is 90 s in setup and materialize)."},
		{ErrPGLockTimeout, "Another session holds a lock on kafka_state rows or tables, such as a hand edit left in an open " +
			"transaction: find the session in pg_locks and pg_stat_activity, end its transaction, and retry. Nothing was committed."},
		{ErrPGIdleTimeout, "Retry: nothing was committed (the session idled while the batch waited for Kafka). If it recurs, " +
			"raise idle_in_transaction_session_timeout for the PG_DSN role above 30 s."},
		{ErrNotSetUp, "Run changesink kafka-state setup against this database first, or check the database PG_DSN names."},
		{ErrPGReadOnly, "PG_DSN points at a read-only server, such as a standby, or a database with " +
			"default_transaction_read_only: point it at the primary."},
		{ErrPGPrivileges, "Grant the PG_DSN role the privileges on schema kafka_state it needs: USAGE on the schema, SELECT, " +
			"INSERT, UPDATE on its tables, TEMPORARY on the database; setup also needs CREATE."},
		{ErrAddedConstraint, "changesink writes only the columns setup makes: drop the constraint the message names, or give " +
			"an added column a default. Nothing was committed."},
		{ErrNotUTF8Database, "Keys and values are stored as UTF-8, unconverted: point PG_DSN at a UTF8 database (CREATE " +
			"DATABASE ... ENCODING 'UTF8' TEMPLATE template0). Nothing was changed."},
		{ErrKafkaNotTLS, "Check security.protocol in KAFKA_PROPERTIES (SSL or SASL_SSL only for a TLS listener) and the port " +
			"in bootstrap.servers."},
		{ErrKafkaNotPlaintext, "A TLS listener answers a plaintext client with a TLS alert: set security.protocol to SSL or " +
			"SASL_SSL in KAFKA_PROPERTIES for it. An HTTP answer means bootstrap.servers names another service's port."},
		{ErrKafkaTLS, "Check in KAFKA_PROPERTIES that security.protocol is SSL or SASL_SSL only for a TLS listener (and the " +
			"port is that listener's); that ssl.ca.location or ssl.ca.pem holds the CA that signed the broker's certificate, " +
			"or, when neither is set, that the system trust store does; that the broker's certificate names the host in " +
			"bootstrap.servers; and, when the broker requires a client certificate, ssl.certificate.location and ssl.key.location."},
		{ErrKafkaSASL, "Check sasl.mechanism, sasl.username and sasl.password in KAFKA_PROPERTIES, and the client's ACLs."},
		{ErrKafkaNotAuthorized, "Grant the client the ACL the message names (kafka-acls.sh --add --allow-principal ...). A " +
			"batch needs DESCRIBE, READ and DESCRIBE_CONFIGS on the topic: changesink reads cleanup.policy and " +
			"delete.retention.ms to know how long tombstones stay."},
		{ErrKafkaUnreachable, "Retry once the brokers in bootstrap.servers answer (a task retry in the flow does it): nothing " +
			"was committed."},
		{ErrKafkaNotReady, "Retry (a task retry in the flow does it): a re-run converges once the cluster settles (a leader " +
			"elected, a broker started). Nothing was committed."},
		{ErrTopicConfig, "A delete.retention.ms that is not a non-negative integer: fix the topic's config (kafka-configs " +
			"--alter). An answer without cleanup.policy or delete.retention.ms comes from a broker or proxy that does not " +
			"answer as Kafka does: report it with the broker's version. Nothing was committed."},
		{ErrJDBCURL, "Use a URL, postgres://user@host:port/database?sslmode=... (the password in PGPASSWORD, or " +
			"percent-encoded after the user), or a key=value string (host=... port=... dbname=... user=... sslmode=...)."},
		{ErrNoRejectedTable, "Run changesink kafka-state setup against this database (it is idempotent and adds " +
			"kafka_state.rejected beside the tables it holds), then re-run; or leave ON_BAD_RECORD unset (refuse)."},
		{ErrEncryptedPKCS8, "Store the key decrypted (openssl pkcs8 -in key.pem -out plain.pem) in a secret, or re-encrypt " +
			"it as legacy PEM (openssl ec|rsa -aes256)."},
		{ErrNothingCommitted, "Re-run (a task retry in the flow does it): the batch rolled back, and the next batch resumes " +
			"from the saved positions."},
	}
}
