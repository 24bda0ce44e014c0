package kafkastate

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Sentinels for every refusal of the seed flow (and a few changesink adds).
// Materialize and Verify wrap them (directly or through a typed error whose
// Unwrap returns one of them) and mark the result with outcome.Refused.Mark, so
// callers test errors.Is(err, ErrX) and outcome.Classify(err) ==
// outcome.Refused; ErrTopicUnavailable is sometimes a configuration error
// instead (its comment says when). A refused run has changed no table.
var (
	// ErrTopicUnavailable: the topic does not exist, has no partitions, or
	// its metadata carries an error. Seed: 'Topic metadata is unavailable'.
	// A topic that does not exist is refused only when positions this
	// cluster's batches saved say it was read and then deleted; it is
	// marked outcome.Config when no batch ever read it (no saved positions:
	// TOPIC misspelt, or the topic not created yet) or the saved positions
	// were read on another cluster (KAFKA_PROPERTIES names the wrong one),
	// and takes the class of the PostgreSQL failure when the positions
	// cannot be read.
	ErrTopicUnavailable = errors.New("topic metadata is unavailable")
	// ErrNoIDs: the broker reports no cluster id or an all-zero topic id
	// (brokers older than Kafka 2.8 / metadata v10). Seed: 'Broker must
	// expose cluster and topic IDs'.
	ErrNoIDs = errors.New("broker must expose cluster and topic ids")
	// ErrIDsChanged: the saved cluster id or topic id differs from the
	// broker's. Seed: 'Cluster or topic ID changed; rebuild into an empty
	// destination'.
	ErrIDsChanged = errors.New("cluster or topic id changed")
	// ErrPartitionsChanged: the saved partitions differ from the topic's.
	// Seed: 'Partition set changed; rebuild into an empty destination'.
	ErrPartitionsChanged = errors.New("partition set changed")
	// ErrValuesWithoutPositions: records exist for the topic but no
	// positions row. Seed: 'Values exist without read positions; restore
	// both together'.
	ErrValuesWithoutPositions = errors.New("values exist without read positions")
	// ErrBadPositions: the positions row cannot be read as
	// {"<partition>": <next offset>} (changesink addition: the seed would
	// fail with a Python exception).
	ErrBadPositions = errors.New("saved positions are malformed")
	// ErrOffsetOutOfRange: a saved offset is below the partition's log start
	// offset or above its last stable offset (read_committed end), or the
	// broker answered a fetch with OFFSET_OUT_OF_RANGE. Seed: 'Partition p:
	// saved offset is outside the retained log'.
	ErrOffsetOutOfRange = errors.New("saved offset is outside the retained log")
	// ErrOffsetPastEnd: an ErrOffsetOutOfRange whose saved offset is past
	// the log's end: no deletion explains it; the positions are another
	// topic's (one of this name, recreated) or were edited.
	ErrOffsetPastEnd = errors.New("saved offset is past the log end")
	// ErrTombstonesMayBeLost: a compacted topic's cleaner may have removed
	// tombstones the batch had not read yet, because more than
	// delete.retention.ms passed since the positions were last caught up
	// (see TombstoneError; changesink addition: the seed reads on past the
	// gap and leaves the keys of the removed tombstones live for ever).
	ErrTombstonesMayBeLost = errors.New("tombstones may have been removed before they were read")
	// ErrNullKey: a record has a null key. Seed: 'Null Kafka key; the entire
	// batch will roll back'.
	ErrNullKey = errors.New("null kafka key")
	// ErrKeyNotUTF8: a key is not valid UTF-8. Seed: key.decode('utf-8').
	ErrKeyNotUTF8 = errors.New("key is not valid utf-8")
	// ErrKeyNUL: a key contains a NUL byte, which PostgreSQL text cannot
	// hold (the seed fails inside psycopg).
	ErrKeyNUL = errors.New("key contains a nul byte")
	// ErrKeyTooLong: a key is too long for kafka_state.records' primary key
	// index (a btree entry holds about 2700 bytes of topic and key after
	// compression), so PostgreSQL refuses to store it (the seed fails inside
	// psycopg).
	ErrKeyTooLong = errors.New("key is too long for postgresql's primary key index")
	// ErrValueNotUTF8: a value is not valid UTF-8. Seed:
	// value.decode('utf-8').
	ErrValueNotUTF8 = errors.New("value is not valid utf-8")
	// ErrValueNotJSON: a value is not one JSON text, or holds something
	// PostgreSQL's jsonb or the seed's json.loads refuses (the rules:
	// validateValue in record.go). Seed: json.loads.
	ErrValueNotJSON = errors.New("value is not valid json")
	// ErrValueTooLarge: a value is valid JSON but too large for PostgreSQL
	// jsonb (a string over 256 MB, a container whose jsonb form passes
	// 256 MB or PostgreSQL's 1 GB allocation limit): the COPY of the batch
	// refused it (the seed fails inside psycopg).
	ErrValueTooLarge = errors.New("value is too large for postgresql jsonb")
	// ErrNonFinite: a value holds NaN, Infinity or -Infinity, or a number
	// too large for a float64 (which the seed's json.loads turns into
	// inf). Seed: parse_constant=invalid_constant.
	ErrNonFinite = errors.New("non-finite json numbers are not supported")
	// ErrKeyMovedPartitions: one key appears in two partitions (within the
	// batch or against a stored row). Seed: 'A key moved partitions; there
	// is no cross-partition offset order'.
	ErrKeyMovedPartitions = errors.New("a key moved partitions")
	// ErrTopicChanged: the topic was deleted, recreated or repartitioned
	// while the batch ran. Seed: 'Topic changed during this batch; no state
	// was committed'.
	ErrTopicChanged = errors.New("topic changed during this batch")
	// ErrShardOverlap: a partition of this run's shard (SHARD) is claimed in
	// kafka_state.shards by another shard: two shard layouts of the topic
	// (see OverlapError; changesink addition).
	ErrShardOverlap = errors.New("another shard claims this partition")
	// ErrAheadOfPositions: verify found a stored record at or past its
	// partition's durable next offset. Seed: check_saved_positions and
	// stop_on_inconsistent_state.
	ErrAheadOfPositions = errors.New("a record is ahead of its durable read position")
)

// Configuration errors (marked outcome.Config, exit 2): the flow's
// settings ask for what cannot be done; nothing was read or written.
var (
	// ErrEmptyShard: SHARD i/n owns no partition of the topic (i >= the
	// partition count: shard i reads the partitions p with p mod n = i);
	// changesink addition.
	ErrEmptyShard = errors.New("no partition of the topic is in the shard")
)

// Transient failures (marked outcome.Transient, exit 3): a retry succeeds
// once what stood in the way ends.
var (
	// ErrLocked: another materializer (changesink or the seed) holds the
	// per-topic advisory transaction lock, still after waiting LockWait.
	// Seed: 'Another materializer holds this topic lock', a refusal there;
	// here the holder is another run in progress or a killed run whose
	// session PostgreSQL has not closed yet, and a retry succeeds once it
	// ends.
	ErrLocked = errors.New("another materializer holds this topic lock")
	// ErrStopped: the run was stopped (a signal, the task's timeout) before
	// the batch's COMMIT was sent; the message names the stop.
	ErrStopped = errors.New("kafka-state materialize was stopped before its commit")
	// ErrNothingCommitted: a failure before COMMIT was sent that PostgreSQL
	// or the network caused (a connection lost, a backend terminated, a
	// serialization failure): the batch rolled back.
	ErrNothingCommitted = errors.New("nothing was committed")
	// ErrCommitInDoubt: the connection was lost after COMMIT was sent, and
	// what became of the transaction could not be told within 15 s: the
	// batch may be committed (indoubt.go).
	ErrCommitInDoubt = errors.New("PostgreSQL may have committed this batch or not")
	// ErrCommitWaitsForStandby: COMMIT's answer was lost, and the batch's
	// backend still waits for a synchronous standby to confirm it: written
	// on this server, not committed for other sessions yet.
	ErrCommitWaitsForStandby = errors.New("still waits for a synchronous standby")
	// ErrSetupInDoubt: setup's COMMIT got no answer.
	ErrSetupInDoubt = errors.New("COMMIT got no answer: schema kafka_state may have been created or not")
	// ErrReportNotWritten: the content of batch-report.json could not be
	// written before COMMIT (a full disk); nothing was committed.
	ErrReportNotWritten = errors.New("batch-report.json could not be written (disk full?)")
	// ErrReportNotPublished: the batch is committed, but its report file
	// could not be published (renamed into place) after the commit.
	ErrReportNotPublished = errors.New("the batch is committed (its records and positions are in PostgreSQL), " +
		"but batch-report.json could not be published")
)

// Causes of PostgreSQL failures, each with a remedy of its own (Hint): a
// *PGError unwraps to one of them when kafka-state knows what to do.
var (
	// ErrPGLogin: PostgreSQL refused the connection's login: SQLSTATE
	// class 28 (a wrong password, no such role) or 3D000 (no such
	// database). Configuration.
	ErrPGLogin = errors.New("PostgreSQL refused the login")
	// ErrPGNoTLS: the sslmode in PG_DSN requires TLS and the server does
	// not offer it (ssl = off). Configuration.
	ErrPGNoTLS = errors.New("the server does not offer TLS, which the sslmode in PG_DSN requires")
	// ErrPGTLS: the TLS handshake with PostgreSQL failed (the CA, or the
	// host name the certificate holds). Configuration.
	ErrPGTLS = errors.New("the TLS handshake with PostgreSQL failed")
	// ErrPGUnreachable: PostgreSQL did not answer a connect (refused,
	// timed out, unknown host). Transient.
	ErrPGUnreachable = errors.New("PostgreSQL did not answer at the host and port PG_DSN names")
	// ErrPGStatementTimeout: a statement ran past statement_timeout (90 s
	// in setup and materialize), 57014 not caused by a stop. Transient.
	ErrPGStatementTimeout = errors.New("a statement ran past statement_timeout")
	// ErrPGLockTimeout: lock_timeout (set on the role or database) ended a
	// wait for a lock another session holds, 55P03. Transient.
	ErrPGLockTimeout = errors.New("lock_timeout ended a wait for a lock another session holds")
	// ErrPGIdleTimeout: the server ended the session while the batch
	// waited for Kafka, 25P03 idle_in_transaction_session_timeout.
	// Transient.
	ErrPGIdleTimeout = errors.New("the server ended the session for idling in its transaction")
	// ErrNotSetUp: schema kafka_state or one of its tables is missing
	// (42P01, 3F000): setup never ran in this database. Configuration.
	ErrNotSetUp = errors.New("schema kafka_state is not set up in this database")
	// ErrPGReadOnly: the server or the database is read-only (25006: a
	// standby, default_transaction_read_only). Configuration.
	ErrPGReadOnly = errors.New("the server or database is read-only")
	// ErrPGPrivileges: the PG_DSN role lacks a privilege kafka-state
	// needs (42501). Configuration.
	ErrPGPrivileges = errors.New("the PG_DSN role lacks a privilege kafka-state needs")
	// ErrAddedConstraint: a write broke a constraint, or a NOT NULL column
	// without a default, that someone added to a kafka_state table by hand.
	// Configuration.
	ErrAddedConstraint = errors.New("a constraint or column kafka-state setup does not make")
	// ErrNotUTF8Database: the database's encoding is not UTF8; keys reach
	// it unconverted through a binary COPY (requireUTF8). Configuration.
	ErrNotUTF8Database = errors.New("kafka-state needs a UTF8 database")
)

// Causes of Kafka failures, each with a remedy of its own (Hint): a
// *KafkaError or a *TopicError unwraps to one of them.
var (
	// ErrKafkaUnreachable: a broker was unreachable or dropped the
	// connection, or a request timed out. Transient.
	ErrKafkaUnreachable = errors.New("the broker was unreachable or dropped the connection")
	// ErrKafkaNotTLS: the broker closed the connection during the TLS
	// handshake: most likely a plaintext listener. Configuration.
	ErrKafkaNotTLS = errors.New("the port is most likely not a TLS listener")
	// ErrKafkaNotPlaintext: the port answered a plaintext Kafka request
	// with a TLS alert or HTTP. Configuration.
	ErrKafkaNotPlaintext = errors.New("the port does not answer as a plaintext Kafka listener")
	// ErrKafkaTLS: the TLS handshake with a broker failed (the CA, the
	// host name, a client certificate). Configuration.
	ErrKafkaTLS = errors.New("the TLS handshake with the broker failed")
	// ErrKafkaSASL: the broker refused the SASL login or its mechanism.
	// Configuration.
	ErrKafkaSASL = errors.New("the broker refused the SASL login")
	// ErrKafkaNotAuthorized: the broker's authorizer refused a request;
	// the message names the ACL it needs. Configuration.
	ErrKafkaNotAuthorized = errors.New("the client is not authorized")
	// ErrKafkaNotReady: the cluster answered with a retriable error code
	// (a leader moving, a broker starting), a partition had no leader, or
	// an answer lacked a partition or resource. Transient.
	ErrKafkaNotReady = errors.New("the kafka cluster is not ready for this request")
	// ErrTopicConfig: the broker's describe configs answer holds a
	// delete.retention.ms that is not a non-negative integer, or lacks
	// cleanup.policy or delete.retention.ms. Internal.
	ErrTopicConfig = errors.New("the broker reports topic configs changesink cannot read")
	// ErrReadsTooSlow: a TombstoneError (ErrTombstonesMayBeLost) of a
	// batch whose own reads took longer than delete.retention.ms allows,
	// with no saved anchor before them.
	ErrReadsTooSlow = errors.New("a single batch's reads took longer than delete.retention.ms allows")
)

// Causes of configuration errors that have a remedy of their own (Hint).
var (
	// ErrWorkingDir: the working directory cannot take batch-report.json
	// (missing, not writable, or holding a directory of that name).
	ErrWorkingDir = errors.New("the working directory cannot take batch-report.json")
	// ErrJDBCURL: PG_DSN is a JDBC URL, such as the seed flow's
	// KAFKA_STATE_JDBC_URL.
	ErrJDBCURL = errors.New("PG_DSN is not a libpq connection string")
	// ErrEncryptedPKCS8: the client key is an encrypted PKCS#8 key, which
	// Go's standard library cannot decrypt.
	ErrEncryptedPKCS8 = errors.New("an encrypted PKCS#8 key, which changesink cannot decrypt")
	// ErrNoRejectedTable: ON_BAD_RECORD=reject, and the database has no
	// kafka_state.rejected (set up by the seed's DDL or an older
	// changesink); nothing was read or written.
	ErrNoRejectedTable = errors.New("ON_BAD_RECORD=reject needs table kafka_state.rejected, which setup creates")
	// ErrCheckFailed: kafka-state check found problems materialize would
	// meet; each is wrapped beside it (configuration).
	ErrCheckFailed = errors.New("kafka-state check found problems")
)

// RecordError is a refusal of one Kafka record: where it is and which rule it
// breaks. It unwraps to one of ErrNullKey, ErrKeyNotUTF8, ErrKeyNUL, ErrKeyTooLong,
// ErrValueNotUTF8, ErrValueNotJSON, ErrValueTooLarge or ErrNonFinite.
type RecordError struct {
	Topic     string
	Partition int32
	Offset    int64
	// Key is the record key as read (nil for a null key).
	Key []byte
	// Err is the sentinel of the broken rule.
	Err error
	// Detail says where in the key or value the problem is; may be empty.
	Detail string
}

func (e *RecordError) Error() string {
	msg := fmt.Sprintf("topic %q partition %d offset %d", e.Topic, e.Partition, e.Offset)
	if e.Key != nil {
		msg += " key " + quoteKey(e.Key)
	}
	msg += ": " + e.Err.Error()
	if e.Detail != "" {
		msg += " (" + e.Detail + ")"
	}
	return msg
}

func (e *RecordError) Unwrap() error { return e.Err }

// OffsetError says a partition's saved next offset is outside the retained
// log. It unwraps to ErrOffsetOutOfRange (and ErrOffsetPastEnd).
type OffsetError struct {
	Topic     string
	Partition int32
	// Saved is the next offset read from kafka_state.positions (or the
	// offset a fetch asked for).
	Saved int64
	// LogStart and End bound the retained log; End is the last stable
	// offset (the read_committed end). -1 when the broker did not say.
	LogStart, End int64
	// Fetched: the broker answered the batch's fetch at FetchOffset with
	// OFFSET_OUT_OF_RANGE (Saved was within the retained log when the
	// batch started).
	Fetched     bool
	FetchOffset int64
}

func (e *OffsetError) Error() string {
	if e.Fetched {
		return fmt.Sprintf("topic %q partition %d: %s now: fetch at offset %d with OFFSET_OUT_OF_RANGE (saved offset %d): "+
			"records were deleted or truncated while this batch read it", e.Topic, e.Partition, ErrOffsetOutOfRange, e.FetchOffset, e.Saved)
	}
	past := ""
	if e.End >= 0 && e.Saved > e.End {
		past = ": " + ErrOffsetPastEnd.Error()
	}
	return fmt.Sprintf("topic %q partition %d: %s: saved offset %d, retained log [%d, %d]%s",
		e.Topic, e.Partition, ErrOffsetOutOfRange, e.Saved, e.LogStart, e.End, past)
}

// Unwrap returns ErrOffsetOutOfRange, and ErrOffsetPastEnd for a saved
// offset past the log's end.
func (e *OffsetError) Unwrap() []error {
	if !e.Fetched && e.End >= 0 && e.Saved > e.End {
		return []error{ErrOffsetPastEnd, ErrOffsetOutOfRange}
	}
	return []error{ErrOffsetOutOfRange}
}

// MovedKeyError names a key found in two partitions. It unwraps to
// ErrKeyMovedPartitions.
type MovedKeyError struct {
	Topic string
	Key   string
	// Partition and Offset locate one occurrence in this batch; Other* the
	// other occurrence, in this batch or already stored (Stored true).
	Partition, OtherPartition int32
	Offset, OtherOffset       int64
	Stored                    bool
}

func (e *MovedKeyError) Error() string {
	where := "in this batch"
	if e.Stored {
		where = "stored in kafka_state.records"
	}
	return fmt.Sprintf("topic %q key %s: %s: read at partition %d offset %d, but %s at partition %d offset %d; nothing was committed",
		e.Topic, quoteKey([]byte(e.Key)), ErrKeyMovedPartitions, e.Partition, e.Offset, where, e.OtherPartition, e.OtherOffset)
}

func (e *MovedKeyError) Unwrap() error { return ErrKeyMovedPartitions }

// AheadError names a stored record at or past its partition's durable next
// offset (verify). It unwraps to ErrAheadOfPositions.
type AheadError struct {
	Topic     string
	Key       string
	Partition int32
	Offset    int64
	// Next is the partition's saved next offset; -1 when the positions row
	// or its partition entry is missing.
	Next int64
}

func (e *AheadError) Error() string {
	next := "no saved position"
	if e.Next >= 0 {
		next = "saved next offset " + strconv.FormatInt(e.Next, 10)
	}
	return fmt.Sprintf("topic %q key %s: %s: partition %d offset %d, %s",
		e.Topic, quoteKey([]byte(e.Key)), ErrAheadOfPositions, e.Partition, e.Offset, next)
}

func (e *AheadError) Unwrap() error { return ErrAheadOfPositions }

// PGError is a PostgreSQL failure of one operation: what kafka-state was
// doing, the server's SQLSTATE and the driver's error, and the cause with a
// remedy when kafka-state knows one (pgErr and connectErr decide it). Its
// message is the operation, the driver's error and the cause, in one line.
type PGError struct {
	// Op is what was being done: "connect", "read kafka_state.positions",
	// "commit".
	Op string
	// SQLState is the server's error code, "" when the server did not
	// answer (a lost connection, a timeout).
	SQLState string
	// Err is the driver's error.
	Err error
	// Cause is one of the PostgreSQL causes of this package (ErrPGLogin,
	// ErrPGStatementTimeout, ...), wrapped with its facts; nil when
	// kafka-state has no remedy of its own.
	Cause error
}

func (e *PGError) Error() string {
	msg := "postgresql: " + e.Op + ": " + e.Err.Error()
	if e.Cause != nil {
		msg += " (" + e.Cause.Error() + ")"
	}
	return msg
}

// Unwrap returns the driver's error and the cause.
func (e *PGError) Unwrap() []error {
	if e.Cause == nil {
		return []error{e.Err}
	}
	return []error{e.Err, e.Cause}
}

// KafkaError is a request to Kafka that got no answer: a broker
// unreachable or not speaking Kafka on its port, a connection dropped, a
// TLS or SASL handshake that failed. An answer that carries an error code
// is a *TopicError.
type KafkaError struct {
	// Request is what was asked: "metadata", "describe configs", "list
	// offsets" or "fetch".
	Request string
	Topic   string
	// Broker is where the request went: the bootstrap servers, or
	// "broker <id>"; "" when the client chose.
	Broker string
	// Err is the client's error.
	Err error
	// Cause is one of the Kafka causes of this package (ErrKafkaUnreachable,
	// ErrKafkaTLS, ...); nil when kafka-state has no remedy of its own.
	Cause error
}

func (e *KafkaError) Error() string {
	msg := fmt.Sprintf("kafka %s of topic %q", e.Request, e.Topic)
	if e.Broker != "" {
		msg += " from " + e.Broker
	}
	msg += ": " + e.Err.Error()
	if e.Cause != nil {
		msg += " (" + e.Cause.Error() + ")"
	}
	return msg
}

// Unwrap returns the client's error and the cause.
func (e *KafkaError) Unwrap() []error {
	if e.Cause == nil {
		return []error{e.Err}
	}
	return []error{e.Err, e.Cause}
}

// TopicError is a failure about the topic or one of its partitions: what
// the broker answered about it (an error code), or how it differs from
// what the batch or the saved positions expect. Its message starts with
// the topic and, where they apply, the partition and the offset.
type TopicError struct {
	Topic string
	// Partition is the partition at fault, -1 for the whole topic.
	Partition int32
	// Offset is the offset at fault, -1 for none.
	Offset int64
	// Op is the request or step that found it ("kafka list offsets"), ""
	// when the cause says it.
	Op string
	// Err is what is wrong: a sentinel of this package (ErrTopicUnavailable,
	// ErrTopicChanged, ErrKafkaNotReady, ...), or the client's error.
	Err error
	// Cause is what the broker answered (a Kafka error code), or the
	// failure that stood in the way; nil for none.
	Cause error
	// Detail states the facts behind Err ("topic id X became Y"); may be
	// empty.
	Detail string
}

// topicErr is a TopicError about the whole topic.
func topicErr(topic string, err error, detail string) *TopicError {
	return &TopicError{Topic: topic, Partition: -1, Offset: -1, Err: err, Detail: detail}
}

func (e *TopicError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "topic %q", e.Topic)
	if e.Partition >= 0 {
		fmt.Fprintf(&b, " partition %d", e.Partition)
	}
	if e.Offset >= 0 {
		fmt.Fprintf(&b, " offset %d", e.Offset)
	}
	if e.Op != "" {
		b.WriteString(": " + e.Op)
	}
	b.WriteString(": " + e.Err.Error())
	if e.Cause != nil {
		b.WriteString(": " + e.Cause.Error())
	}
	if e.Detail != "" {
		b.WriteString(" (" + e.Detail + ")")
	}
	return b.String()
}

// Unwrap returns Err and the cause.
func (e *TopicError) Unwrap() []error {
	if e.Cause == nil {
		return []error{e.Err}
	}
	return []error{e.Err, e.Cause}
}

// maxQuotedKey bounds how much of a key an error message shows.
const maxQuotedKey = 120

// quoteKey quotes a key for a message: Go-quoted (so invalid UTF-8 and
// control bytes are visible) and cut to maxQuotedKey bytes.
func quoteKey(k []byte) string {
	if len(k) > maxQuotedKey {
		return strconv.Quote(string(k[:maxQuotedKey])) + "…(" + strconv.Itoa(len(k)) + " bytes)"
	}
	return strconv.Quote(string(k))
}
