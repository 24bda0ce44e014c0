package kafkastate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
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
	// unanswered is set when the COMMIT got no answer within this bound
	// (the run's own timeout closed the connection), 0 when the connection
	// was lost.
	unanswered time.Duration
	// stoppedBy names the stop (outcome.StopCause) that arrived while the
	// COMMIT was in flight, "" when none did: the run waited for the
	// answer all the same.
	stoppedBy string
}

// lost says how the COMMIT's answer was lost. A COMMIT the run gave up on
// is not cancelled (cancelGate): the server completes it on its own terms,
// and one waiting for a synchronous standby keeps waiting.
func (d inDoubt) lost() string {
	how := "the connection was lost after COMMIT was sent"
	if d.unanswered > 0 {
		how = fmt.Sprintf("COMMIT got no answer within %s, so the run closed the connection, without a cancel request "+
			"(a COMMIT waiting for a synchronous standby keeps waiting for it)", d.unanswered)
	}
	if d.stoppedBy != "" {
		how += fmt.Sprintf(" (the run was stopped meanwhile, %s, and waited for the COMMIT's answer)", d.stoppedBy)
	}
	return how
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
// nothing committed (ErrNothingCommitted). A backend still waiting for a
// synchronous standby: transient, ErrCommitWaitsForStandby. Otherwise:
// transient, the batch may be committed (ErrCommitInDoubt). Each is a
// *PGError of the commit.
// It runs after a stop too (SIGTERM): the answer decides what the run
// reports.
func (d inDoubt) resolve(ctx context.Context, cc *pgx.ConnConfig, commitErr error, warned []string, log *slog.Logger) error {
	f, err := d.status(ctx, cc)
	switch f.status {
	case "committed":
		standbys := ""
		switch {
		case len(warned) > 0:
			// pg_terminate_backend of a COMMIT waiting in SyncRep: a
			// WARNING, then the connection ends.
			standbys = warnedBefore(warned)
		case f.standbys != "":
			standbys = fmt.Sprintf("; this server's COMMITs wait for synchronous standbys (synchronous_standby_names: %s), and whether one "+
				"confirmed this batch is not known here (this run sent no cancel request, but a wait cancelled by someone else, "+
				"pg_cancel_backend for one, commits on this server alone): check pg_stat_replication", f.standbys)
		}
		log.Warn(fmt.Sprintf("kafka-state: topic %s: %s (%v); on a new connection "+
			"PostgreSQL says transaction %d committed (txid_status) and kafka_state.positions holds this batch's positions, so this batch is in%s",
			d.topic, d.lost(), commitErr, d.xid, standbys))
		return nil
	case "aborted":
		return outcome.Transient.Mark(fmt.Errorf("topic %q: %w", d.topic, &PGError{Op: "commit", Err: commitErr,
			Cause: fmt.Errorf("%s; on a new connection PostgreSQL says transaction %d aborted (txid_status): %w",
				d.lost(), d.xid, ErrNothingCommitted)}))
	}
	var busy *backendBusy
	if errors.As(err, &busy) && busy.syncRep() {
		return outcome.Transient.Mark(fmt.Errorf("topic %q: %w", d.topic, &PGError{Op: "commit", Err: commitErr,
			Cause: fmt.Errorf("%s; after %s backend pid %d %w to confirm transaction %d (pg_stat_activity: %s)",
				d.lost(), d.waitOrDefault(), d.pid, ErrCommitWaitsForStandby, d.xid, busy)}))
	}
	return outcome.Transient.Mark(fmt.Errorf("topic %q: %w", d.topic, &PGError{Op: "commit", Err: commitErr,
		Cause: fmt.Errorf("%s, so %w: what became of transaction %d (backend_xid %d) on backend pid %d could not be told: %v%s",
			d.lost(), ErrCommitInDoubt, d.xid, d.xid%(1<<32), d.pid, err, warnedBefore(warned))}))
}

// warnedBefore quotes the WARNINGs the server sent after COMMIT and before
// the connection ended ("" for none): a wait for a synchronous standby
// ended by pg_terminate_backend says the transaction committed locally.
func warnedBefore(warned []string) string {
	if len(warned) == 0 {
		return ""
	}
	return "; PostgreSQL warned before the connection ended: " + strings.Join(warned, "; ") + "; " + syncRepEnded
}

// syncRepEnded is what a WARNING after COMMIT means (cancelGate keeps them).
const syncRepEnded = "a COMMIT whose wait for a synchronous standby was ended (pg_cancel_backend, pg_terminate_backend, " +
	"a server shutdown) is committed on this server alone, and may be on no standby: check pg_stat_replication"

// fate is what status found: the transaction's status, and for a
// committed one the synchronous standbys a COMMIT of this session waits for
// (empty when none).
type fate struct{ status, standbys string }

// backendBusy is what the batch's backend was doing, still inside the
// batch's transaction, when status gave up (pg_stat_activity).
type backendBusy struct {
	state, waitType, wait string
}

func (b *backendBusy) Error() string { return "the backend is " + b.activity() }

// activity is the backend's state and wait event, as pg_stat_activity
// shows them.
func (b *backendBusy) activity() string {
	if b.wait == "" {
		return b.state
	}
	return b.state + ", wait event " + b.waitType + "/" + b.wait
}

// syncRep: a COMMIT written and flushed on the server that waits for a
// synchronous standby's confirmation. txid_status says "in progress" all
// the while, and a closed client connection does not end the wait; a
// cancel request does (pgx sends one when it loses a connection, but not
// for the batch's COMMIT: cancelGate), and the transaction then commits on
// this server alone.
func (b *backendBusy) syncRep() bool { return b.waitType == "IPC" && b.wait == "SyncRep" }

func (d inDoubt) waitOrDefault() time.Duration {
	if d.wait == 0 {
		return inDoubtWait
	}
	return d.wait
}

// status tells the transaction's fate: "committed", "aborted", or "" with
// the reason it cannot be told. "in progress" is asked again: the backend ends the transaction
// (committed if it read the COMMIT) when it notices its client gone, and
// after inDoubtOrphanAge the batch's backend is ended if it is idle in the
// transaction. A backend still in the transaction after the wait is
// described (*backendBusy): a COMMIT waiting for a synchronous standby stays
// "in progress" for as long as no standby confirms it. "committed" counts
// only when the positions row shows what the batch wrote: txid_status says
// committed once the transaction has left the server's running set, when its
// rows are visible to every statement that starts after, so a row that does
// not show it (another run committed since, or another server answered after
// a failover that lost the commit and gave its xid to another transaction)
// cannot be told.
func (d inDoubt) status(ctx context.Context, cc *pgx.ConnConfig) (fate, error) {
	wait := d.waitOrDefault()
	ctx = context.WithoutCancel(ctx)
	deadline := time.Now().Add(wait)
	cctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	// pgx itself, not connect: its remedies are for a run that has written
	// nothing. pgconn's connect errors never hold the password.
	conn, err := pgx.ConnectConfig(cctx, cc)
	if err != nil {
		return fate{}, fmt.Errorf("a new connection failed: %w", err)
	}
	defer closeConn(conn)
	// Statements get a little longer than the wait, so that the last
	// answer, and the backend's description, still arrive.
	qctx, qcancel := context.WithDeadline(ctx, deadline.Add(5*time.Second))
	defer qcancel()
	started := time.Now()
	ended := false
	for {
		var status *string
		if err := queryRow(qctx, conn, "read the transaction's status", sqlTxStatus, []any{d.xid}, &status); err != nil {
			return fate{}, err
		}
		switch {
		case status == nil:
			return fate{}, errors.New("txid_status: too old to tell")
		case *status == "aborted":
			return fate{status: *status}, nil
		case *status == "committed":
			var holds bool
			err := queryRow(qctx, conn, "read kafka_state.positions", sqlPositionsAre, []any{d.topic, d.next, d.clusterID, d.topicID}, &holds)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return fate{}, err
			}
			if !holds {
				return fate{}, errors.New("txid_status says committed, but kafka_state.positions does not show this batch's positions")
			}
			f := fate{status: *status}
			err = queryRow(qctx, conn, "read the synchronous standbys", sqlSyncStandbys, nil, &f.standbys)
			return f, err
		case !ended && time.Since(started) >= inDoubtOrphanAge:
			// A failure (no privilege to signal it) leaves it to the wait.
			_ = queryRow(qctx, conn, "end the batch's idle backend", sqlEndIdleBackend, []any{d.pid, d.xid, d.start}, new(bool))
			ended = true
		}
		if !time.Now().Before(deadline) {
			break
		}
		time.Sleep(min(100*time.Millisecond, time.Until(deadline)))
	}
	pending := fmt.Errorf("txid_status: still in progress after %s", wait)
	var b backendBusy
	switch err := queryRow(qctx, conn, "describe the batch's backend", sqlBackendActivity, []any{d.pid, d.xid, d.start}, &b.state, &b.waitType, &b.wait); {
	case err == nil:
		return fate{}, fmt.Errorf("%w; %w", pending, &b)
	case errors.Is(err, pgx.ErrNoRows):
		return fate{}, pending
	default:
		return fate{}, fmt.Errorf("%w (%w)", pending, err)
	}
}
