package kafkastate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/changesink/changesink/internal/outcome"
)

// inDoubt is a batch whose COMMIT was sent and whose answer was lost: its
// transaction (xid, from txid_current; started at start) on backend pid,
// and the positions row it wrote.
type inDoubt struct {
	xid, pid                        int64
	start                           time.Time
	topic, clusterID, topicID, next string
	// wait bounds status (0: inDoubtWait).
	wait time.Duration
}

// How long resolve asks, and after how long of "in progress" it ends the
// batch's own backend when that is idle in its transaction (the COMMIT never
// reached it, and the backend has not noticed the lost client: a network
// that dropped the connection without a FIN or RST). The two bounds are
// liveness bounds, not expected times: a closed connection resolves at once.
const (
	inDoubtWait      = 15 * time.Second
	inDoubtOrphanAge = time.Second
)

// resolve asks PostgreSQL on a new connection what became of d's transaction
// (commitErr: the lost COMMIT's error). Committed, with the positions row
// holding what the batch wrote: nil, and a WARN line. Aborted: transient,
// nothing committed. Otherwise: transient, the batch may be committed.
// It runs after a stop too (SIGTERM): the answer decides what the run
// reports.
func (d inDoubt) resolve(ctx context.Context, cc *pgx.ConnConfig, commitErr error, log *slog.Logger) error {
	status, err := d.status(ctx, cc)
	switch status {
	case "committed":
		log.Warn(fmt.Sprintf("kafka-state: topic %s: the connection was lost after COMMIT was sent (%v); on a new connection "+
			"PostgreSQL says transaction %d committed (txid_status) and kafka_state.positions holds this batch's positions, so this batch is in",
			d.topic, commitErr, d.xid))
		return nil
	case "aborted":
		return outcome.Transient.Mark(fmt.Errorf("topic %q: postgresql: commit: %w: the connection was lost after COMMIT was sent, "+
			"and on a new connection PostgreSQL says transaction %d aborted (txid_status): nothing was committed; re-run (the next batch "+
			"resumes from the saved positions)", d.topic, commitErr, d.xid))
	}
	return outcome.Transient.Mark(fmt.Errorf("topic %q: postgresql: commit: %w: the connection was lost after COMMIT was sent, "+
		"so PostgreSQL may have committed this batch or not (batch-report.json was not written; what became of transaction %d "+
		"on backend pid %d could not be told: %v); re-run: the next batch resumes from whatever positions were committed, and the state "+
		"converges either way (while that backend holds the transaction, runs wait for the topic's lock: if pg_stat_activity shows pid %d "+
		"idle in transaction with backend_xid %d, SELECT pg_terminate_backend(%d) ends it uncommitted)",
		d.topic, commitErr, d.xid, d.pid, err, d.pid, d.xid%(1<<32), d.pid))
}

// status is "committed", "aborted", or "" with the reason it cannot be
// told. "in progress" is asked again: the backend ends the transaction
// (committed if it read the COMMIT) when it notices its client gone, and
// after inDoubtOrphanAge the batch's backend is ended if it is idle in the
// transaction. "committed" counts once the positions row shows what the
// batch wrote: txid_status reads the commit log, which says committed a
// moment before other sessions see the rows (longer while the server waits
// for a synchronous standby), so it is asked again until then; a row that
// never shows it (another run committed since, or another server answered
// after a failover that lost the commit and gave its xid to another
// transaction) cannot be told.
func (d inDoubt) status(ctx context.Context, cc *pgx.ConnConfig) (string, error) {
	wait := d.wait
	if wait == 0 {
		wait = inDoubtWait
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait)
	defer cancel()
	// pgx itself, not connect: its remedies are for a run that has written
	// nothing. pgconn's connect errors never hold the password.
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return "", fmt.Errorf("a new connection failed: %w", err)
	}
	defer closeConn(conn)
	started := time.Now()
	ended := false
	pending := errors.New("txid_status: still in progress")
	for {
		var status *string
		if err := queryRow(ctx, conn, "read the transaction's status", sqlTxStatus, []any{d.xid}, &status); err != nil {
			return "", err
		}
		switch {
		case status == nil:
			return "", errors.New("txid_status: too old to tell")
		case *status == "aborted":
			return *status, nil
		case *status == "committed":
			var holds bool
			err := queryRow(ctx, conn, "read kafka_state.positions", sqlPositionsAre, []any{d.topic, d.next, d.clusterID, d.topicID}, &holds)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return "", err
			}
			if holds {
				return *status, nil
			}
			pending = errors.New("txid_status says committed, but kafka_state.positions does not show this batch's positions " +
				"(not yet visible: a synchronous standby not answering? another run committed newer ones since? or another server answered, after a failover?)")
		case !ended && time.Since(started) >= inDoubtOrphanAge:
			// A failure (no privilege to signal it) leaves it to the wait.
			_ = queryRow(ctx, conn, "end the batch's idle backend", sqlEndIdleBackend, []any{d.pid, d.xid, d.start}, new(bool))
			ended = true
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("%w after %s", pending, wait)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
