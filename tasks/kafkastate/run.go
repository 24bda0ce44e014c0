package kafkastate

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/changesink/changesink/internal/kestra"
	"github.com/changesink/changesink/internal/outcome"
)

// run is one Materialize: its settings and where it happens, what it keeps
// for all its batches (the Kafka client, the PostgreSQL connection, the
// topic's retention, the report file) and when it started.
type run struct {
	cfg     Config
	env     Env
	log     *slog.Logger
	topic   string
	shard   Shard
	cc      *pgx.ConnConfig
	cl      *kgo.Client
	report  *kestra.File
	started time.Time
	// deadline ends a drain (Config.DrainSeconds after started); zero for
	// one batch.
	deadline time.Time

	// What the committed batches did, and when progress was last logged.
	batches              int
	consumed, tombstones int64
	progressAt           time.Time

	// ret is the topic's retention, read by the first batch (ok).
	ret   retention
	retOK bool
	// conn is the batch's PostgreSQL connection, made by the first batch;
	// gate guards its cancel requests (cancelGate).
	conn *pgx.Conn
	gate *cancelGate
	// claimed: the shard's claim is made (the first batch makes it).
	// shards: whether kafka_state.shards exists, once asked (shardsKnown).
	claimed             bool
	shards, shardsKnown bool
	// reject: ON_BAD_RECORD=reject; rejectedKnown: kafka_state.rejected was
	// found (requireRejected, once per run); rejected counts the records
	// the committed batches kept aside.
	reject, rejectedKnown bool
	rejected              int64
}

// start checks what a run needs before anything changes: the Kafka
// properties, the PostgreSQL settings and a working directory that takes
// the report file; then it builds the Kafka client.
func start(cfg Config, env Env) (*run, error) {
	r := &run{cfg: cfg, env: env, log: env.log(), topic: cfg.Topic, started: time.Now()}
	r.progressAt = r.started
	var err error
	if r.shard, err = ParseShard(cfg.Shard); err != nil {
		return nil, err
	}
	if r.reject, err = cfg.rejects(); err != nil {
		return nil, err
	}
	if cfg.DrainSeconds > 0 {
		r.deadline = r.started.Add(time.Duration(cfg.DrainSeconds) * time.Second)
	}
	props, err := ParseProperties(cfg.KafkaProperties)
	if err != nil {
		return nil, err
	}
	if len(props.Overridden) > 0 {
		r.log.Info("kafka-state: KAFKA_PROPERTIES keys ignored, as the seed overrides them", "keys", strings.Join(props.Overridden, ","))
	}
	if r.cc, err = cfg.Postgres.connConfig(); err != nil {
		return nil, err
	}
	// The report is written after the commit; find out now, before
	// anything changes, whether the working directory takes it.
	if r.report, err = env.Dir.Create(ReportFile); err != nil {
		return nil, outcome.Config.Mark(fmt.Errorf("%s: %w: %w", kestra.EnvWorkingDir, ErrWorkingDir, err))
	}
	if r.cl, err = newClient(props); err != nil {
		r.report.Abort()
		return nil, err
	}
	return r, nil
}

// close releases what the run holds; a report file not published by
// finish is removed.
func (r *run) close() {
	if r.conn != nil {
		closeConn(r.conn)
	}
	r.cl.Close()
	r.report.Abort()
}

// connection returns the run's PostgreSQL connection, made on first use
// (after the topic's metadata, so an unknown topic connects only to tell
// why: unknownTopic).
func (r *run) connection(ctx context.Context) (*pgx.Conn, error) {
	if r.conn != nil {
		return r.conn, nil
	}
	gate := &cancelGate{}
	conn, err := connect(ctx, gate.config(r.cc))
	if err != nil {
		return nil, err
	}
	if err := requireUTF8(conn); err != nil {
		closeConn(conn)
		return nil, err
	}
	r.conn, r.gate = conn, gate
	return conn, nil
}

// progressEvery is how often a drain logs its progress.
const progressEvery = 5 * time.Second

// fetchDeadline is when a batch starting now stops fetching: PollSeconds
// from now, and no later than the drain's end.
func (r *run) fetchDeadline() time.Time {
	d := time.Now().Add(time.Duration(r.cfg.PollSeconds) * time.Second)
	if !r.deadline.IsZero() && r.deadline.Before(d) {
		return r.deadline
	}
	return d
}

// isLast says whether the batch b, about to commit, is the run's last: one
// batch per run without DrainSeconds; in a drain, the one that read every
// partition to its end, that advanced none (nothing more can be read now),
// or that ends past the drain's end.
func (r *run) isLast(b *batch) bool {
	return r.deadline.IsZero() || b.caughtUp || !b.advanced || !time.Now().Before(r.deadline)
}

// committed counts the committed batch b and, in a drain, logs the
// progress at most every progressEvery: records, rate, and the lag left
// (the high watermark less the next offset, summed over the partitions).
func (r *run) committed(b *batch) {
	r.batches++
	r.consumed += b.consumed
	r.tombstones += b.tombstones
	r.rejected += int64(len(b.rejected))
	b.logRejected()
	every := progressEvery
	if r.env.hooks.progressEvery > 0 {
		every = r.env.hooks.progressEvery
	}
	if r.deadline.IsZero() || b.last || time.Since(r.progressAt) < every {
		return
	}
	r.progressAt = time.Now()
	took := time.Since(r.started)
	r.log.Info(fmt.Sprintf("kafka-state: topic %s: drain: %d batches committed, %d records in %s (%.0f records/s); lag left %d",
		r.topic, r.batches, r.consumed, took.Round(time.Millisecond), float64(r.consumed)/took.Seconds(), b.lagLeft()))
}

// failed says, of a failure after batches of this run committed, that
// those stay committed; a failure of the first batch passes unchanged.
func (r *run) failed(err error) error {
	if err == nil || r.batches == 0 {
		return err
	}
	return fmt.Errorf("topic %q: after %d committed batches of this run (%d records; they stay committed, a re-run resumes after them): %w",
		r.topic, r.batches, r.consumed, err)
}

// result is the run's Result as it will be once its last batch b, not
// counted yet, commits: what the report file says.
func (r *run) result(b *batch) *Result {
	return &Result{Topic: r.topic, Consumed: r.consumed + b.consumed, Tombstones: r.tombstones + b.tombstones,
		NextOffsets: b.next, LiveKeys: b.live, Partitions: len(b.parts), Shard: r.shard.String(), Batches: r.batches + 1,
		Reject: r.reject, Rejected: r.rejected + int64(len(b.rejected))}
}

// finish measures the lag the run leaves (the high watermark less the next
// offset, per partition, read after the last commit), publishes the report
// of the last batch b and returns the run's Result. A lag that cannot be
// read is logged, not failed: the batches are committed.
func (r *run) finish(ctx context.Context, b *batch) (*Result, error) {
	res := &Result{Topic: r.topic, Consumed: r.consumed, Tombstones: r.tombstones, NextOffsets: b.next, LiveKeys: b.live,
		Partitions: len(b.parts), Shard: r.shard.String(), Batches: r.batches, Reject: r.reject, Rejected: r.rejected}
	res.Duration = time.Since(r.started)
	res.LagTotal = -1
	if marks, err := listWatermarks(ctx, r.cl, r.topic, b.meta); err != nil {
		r.log.Warn(fmt.Sprintf("kafka-state: topic %s: the lag after the commit could not be read: %v", r.topic, err))
	} else {
		res.setLag(marks)
	}
	if err := r.report.Commit(); err != nil {
		// The state is right; only the task's outputs are missing. A re-run
		// commits nothing twice and reports what came after this batch.
		return nil, outcome.Transient.Mark(fmt.Errorf("%w in %s: %w", ErrReportNotPublished, kestra.EnvWorkingDir, err))
	}
	return res, nil
}
