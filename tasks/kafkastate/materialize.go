package kafkastate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/changesink/changesink/internal/outcome"
)

// pgTimeout bounds the connection and every statement from the client side
// (the server side has the seed's statement_timeout of 90 s).
const pgTimeout = 100 * time.Second

// Materialize runs one bounded batch, or with cfg.DrainSeconds a drain of
// them (until every partition is read to its end, or the time is up; each
// batch commits as the one batch does, and progress is logged); then it
// reads the lag left (Result.Lag). A batch reads up to cfg.MaxRecords records
// of cfg.Topic from the positions saved in PostgreSQL, for at most
// cfg.PollSeconds, and commits the records' latest values and the next
// positions in one PostgreSQL transaction, under the seed's per-topic
// advisory lock. Only after the commit does it write batch-report.json into
// env.Dir and return the Result; the file is created (under a hidden
// temporary name) before anything else, so a working directory that cannot
// take it is a configuration error before any change. A stop (ctx
// cancelled) before COMMIT is sent commits nothing; once COMMIT is sent, the
// run waits for its answer and reports it.
//
// Steps of a batch (batch.go; the seed's checks, in the seed's order):
//
//  1. describe: Kafka metadata, uncached: topic present with partitions
//     (ErrTopicUnavailable; for a topic the broker does not know, the
//     positions row, read without the lock, tells a deleted topic from a
//     TOPIC no batch read, or read on another cluster: see unknownTopic);
//     cluster id and non-zero topic id (ErrNoIDs); the topic's
//     cleanup.policy and delete.retention.ms.
//  2. begin, readPositions: one transaction, SET LOCAL statement_timeout =
//     '90s', pg_try_advisory_xact_lock(hashtextextended(
//     'kestra-kafka-state:' || topic, 0)) (ErrLocked); positions read FOR
//     UPDATE; saved ids equal (ErrIDsChanged); saved partitions equal
//     (ErrPartitionsChanged); no records without positions
//     (ErrValuesWithoutPositions).
//  3. plan: log start offset <= saved offset <= last stable offset, per
//     partition (ErrOffsetOutOfRange); the tombstone rule before reading
//     (ErrTombstonesMayBeLost: see tombstones.go).
//  4. fetchAndCopy: every partition concurrently (read_committed, by topic
//     id), each until its end (next >= last stable offset), the budget or
//     the deadline; validate every record (RecordError); COPY into a
//     temporary staging table while fetching. Then the tombstone rule on
//     the reads' end (ErrTombstonesMayBeLost).
//  5. merge: one merge statement (highest offset per key, only if higher
//     than stored; with MERGE it also finds keys stored at another
//     partition), and the moved-key query (ErrKeyMovedPartitions) when the
//     merge found one, when two partitions yielded the same key hash, or
//     without MERGE.
//  6. recheck: fresh metadata: same topic id and partitions
//     (ErrTopicChanged).
//  7. commit: positions upsert (updated_at moves only when every partition
//     was read to its end), live_keys, commit; then the report file.
//
// Refusals are marked outcome.Refused, configuration errors outcome.Config,
// lost connections and timeouts outcome.Transient. Whatever fails, nothing
// of the failing batch is committed (the earlier batches of a drain are,
// and the error says so). When the connection is lost after COMMIT was sent, a new
// connection asks PostgreSQL (txid_status) whether the transaction
// committed: committed is a success (logged at WARN), aborted a transient
// failure that committed nothing; when it cannot tell, the error says the
// batch may be committed.
func Materialize(ctx context.Context, cfg Config, env Env) (_ *Result, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r, err := start(cfg, env)
	if err != nil {
		return nil, err
	}
	defer r.close()
	defer func() { err = r.failed(err) }()
	for {
		b, err := r.batch(ctx)
		if err != nil {
			return nil, err
		}
		r.committed(b)
		if b.last {
			return r.finish(ctx, b)
		}
	}
}

// stoppedBeforeCommit says what a stop left when it ended the run before
// COMMIT was sent: nothing was committed (ErrStopped, ErrNothingCommitted). cmd/changesink cancels ctx on
// SIGTERM (how Kestra stops a task) and SIGINT, and its cause then names
// the signal (signal.NotifyContext: "interrupt signal received",
// "terminated signal received"). Every failure returned once ctx is done is
// taken for the stop's: the failed step's error is most often "context
// canceled", but not always (pgx closes the connection under a COPY, and
// the COPY then fails with "use of closed network connection"); it is kept
// as the cause. A refusal or a configuration error keeps its class: it is
// about the input or the setup, and a re-run would meet it again. Errors of
// a run whose ctx is not done pass unchanged.
func stoppedBeforeCommit(ctx context.Context, topic string, err error) error {
	if err == nil || ctx.Err() == nil {
		return err
	}
	if k := outcome.Classify(err); k == outcome.Refused || k == outcome.Config {
		return err
	}
	return outcome.Transient.Mark(fmt.Errorf("topic %q: %w (%s): %w: %w", topic, ErrStopped, outcome.StopCause(ctx), ErrNothingCommitted, err))
}

// retryBeforeCommit adds to a transient failure before COMMIT was sent
// that does not say it itself what every transient kafka-state error says:
// nothing was committed (ErrNothingCommitted, whose hint says a re-run
// resumes). Those are the errors that
// outcome.Classify calls transient by nature, unmarked: a PostgreSQL
// connection lost or its backend terminated (57P01, as pg_terminate_backend
// sends it), a serialization failure. An error marked outcome.Transient
// here (a stop, the topic lock, a statement or lock timeout, an idle
// session, Kafka's) says what it left itself and passes unchanged, like
// every other error.
func retryBeforeCommit(topic string, err error) error {
	var marked *outcome.Error
	if outcome.Classify(err) != outcome.Transient || errors.As(err, &marked) {
		return err
	}
	return outcome.Transient.Mark(fmt.Errorf("topic %q: %w; %w", topic, err, ErrNothingCommitted))
}
