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
	cc      *pgx.ConnConfig
	cl      *kgo.Client
	report  *kestra.File
	started time.Time

	// ret is the topic's retention, read by the first batch (ok).
	ret   retention
	retOK bool
	// conn is the batch's PostgreSQL connection, made by the first batch;
	// gate guards its cancel requests (cancelGate).
	conn *pgx.Conn
	gate *cancelGate
}

// start checks what a run needs before anything changes: the Kafka
// properties, the PostgreSQL settings and a working directory that takes
// the report file; then it builds the Kafka client.
func start(cfg Config, env Env) (*run, error) {
	r := &run{cfg: cfg, env: env, log: env.log(), topic: cfg.Topic, started: time.Now()}
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
		return nil, outcome.Config.Mark(fmt.Errorf("%s: %w; use a writable working directory (nothing was done)", kestra.EnvWorkingDir, err))
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

// finish publishes the report of the committed batch b and returns the
// run's Result.
func (r *run) finish(b *batch) (*Result, error) {
	res := b.res
	res.Duration = time.Since(r.started)
	if err := r.report.Commit(); err != nil {
		// The state is right; only the task's outputs are missing. A re-run
		// commits nothing twice and reports what came after this batch.
		return nil, outcome.Transient.Mark(fmt.Errorf("the batch is committed (its records and positions are in PostgreSQL), but %s "+
			"could not be published in %s: %w; re-run (a re-run converges: it commits nothing twice, and reports the records after this batch)",
			ReportFile, kestra.EnvWorkingDir, err))
	}
	return res, nil
}
