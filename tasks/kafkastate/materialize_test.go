package kafkastate

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/changesink/changesink/internal/outcome"
)

// TestStoppedBeforeCommit: once the run's context is done, every failure
// before COMMIT says that the run was stopped and that nothing was
// committed, wrapping the step's error. A stop during the COPY ended some
// runs with the COPY's "use of closed network connection" alone (pgx closes
// the connection under it), which did not wrap context.Canceled. The stop
// is named by the context's cause (cmd/changesink's signal.NotifyContext
// names the signal), never as SIGTERM for a SIGINT.
func TestStoppedBeforeCommit(t *testing.T) {
	// The stdlib's own cause, as cmd/changesink gets it for a SIGINT.
	sigCtx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sigCtx.Done():
	case <-time.After(time.Minute):
		t.Fatal("SIGINT did not cancel the signal context")
	}
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	timedOut, cancelTimeout := context.WithDeadline(context.Background(), time.Unix(0, 0))
	defer cancelTimeout()
	closed := fmt.Errorf("postgresql: copy the batch into the staging table: %w",
		&net.OpError{Op: "read", Net: "tcp", Err: net.ErrClosed})
	terminated := fmt.Errorf("postgresql: release the merge's savepoint: %w",
		&pgconn.PgError{Severity: "FATAL", Code: pgerrcode.AdminShutdown, Message: "terminating connection due to administrator command"})
	refused := outcome.Refused.Mark(fmt.Errorf("topic %q: %w", "t", ErrTopicChanged))
	config := outcome.Config.Mark(errors.New("postgresql: database \"x\" has encoding LATIN1"))
	const generic = "was stopped before its commit (a stop signal, SIGTERM or SIGINT, or the task's timeout): nothing was committed"
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want outcome.Kind
		says []string // empty: err comes back unchanged
	}{
		{"not stopped", context.Background(), closed, outcome.Transient, nil},
		{"the step's context error", stopped, fmt.Errorf("postgresql: merge: %w", context.Canceled), outcome.Transient, []string{generic, "merge: context canceled"}},
		{"the COPY's closed connection", stopped, closed, outcome.Transient, []string{generic, "use of closed network connection"}},
		{"a terminated backend", stopped, terminated, outcome.Transient, []string{generic, "SQLSTATE 57P01"}},
		{"an unforeseen error", stopped, errors.New("copy the batch into the staging table: 3 rows copied, 5 records read"), outcome.Transient, []string{generic, "3 rows copied"}},
		{"SIGINT", sigCtx, closed, outcome.Transient, []string{`topic "t": kafka-state materialize was stopped before its commit (interrupt signal received): nothing was committed: postgresql: copy`}},
		{"a deadline", timedOut, closed, outcome.Transient, []string{generic}},
		{"a refusal stays one", stopped, refused, outcome.Refused, nil},
		{"a configuration error stays one", stopped, config, outcome.Config, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := stoppedBeforeCommit(tc.ctx, "t", tc.err)
			if k := outcome.Classify(got); k != tc.want {
				t.Errorf("class %v, want %v: %v", k, tc.want, got)
			}
			if !errors.Is(got, tc.err) {
				t.Errorf("%v does not wrap the step's error", got)
			}
			if len(tc.says) > 0 && (!errors.Is(got, ErrStopped) || !strings.HasPrefix(Hint(got), "Re-run")) {
				t.Errorf("%v: not ErrStopped, or its hint %q is not to re-run", got, Hint(got))
			}
			if len(tc.says) == 0 && got != tc.err {
				t.Errorf("got %v, want the error unchanged", got)
			}
			for _, s := range tc.says {
				if !strings.Contains(got.Error(), s) {
					t.Errorf("%q does not say %q", got, s)
				}
			}
			if tc.ctx == sigCtx && strings.Contains(got.Error(), "SIGTERM") {
				t.Errorf("a SIGINT is called SIGTERM: %v", got)
			}
		})
	}
	if got := stoppedBeforeCommit(stopped, "t", nil); got != nil {
		t.Errorf("no error became %v", got)
	}
}

// TestRetryBeforeCommit: a transient failure before COMMIT that does not
// say itself what it left (a driver's error, classified by its nature) says
// that nothing was committed, and its hint that a re-run resumes; one that says it
// (every error kafka-state marks transient: a stop, a statement timeout, the
// topic lock, Kafka's) and every other class pass unchanged, so no message
// says it twice.
func TestRetryBeforeCommit(t *testing.T) {
	const hint = "; nothing was committed"
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	terminated := &pgconn.PgError{Severity: "FATAL", Code: pgerrcode.AdminShutdown, Message: "terminating connection due to administrator command"}
	for _, tc := range []struct {
		name string
		err  error
		says string // "": err comes back unchanged
	}{
		{"a terminated backend", pgErr(context.Background(), terminated, "release the merge's savepoint"),
			`topic "t": postgresql: release the merge's savepoint: FATAL: terminating connection due to administrator command (SQLSTATE 57P01)` + hint},
		{"a lost connection", pgErr(context.Background(), &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, "merge"),
			`topic "t": postgresql: merge: read tcp: connection reset by peer` + hint},
		{"a serialization failure", pgErr(context.Background(), &pgconn.PgError{Code: pgerrcode.SerializationFailure}, "merge"), hint},
		{"a statement timeout says it", pgErr(context.Background(), &pgconn.PgError{Code: pgerrcode.QueryCanceled}, "merge"), ""},
		{"a lock timeout says it", pgErr(context.Background(), &pgconn.PgError{Code: pgerrcode.LockNotAvailable}, "read kafka_state.positions"), ""},
		{"a stop says it", stoppedBeforeCommit(stopped, "t", pgErr(stopped, terminated, "merge")), ""},
		{"kafka says it", kafkaRequestErr(metadataRequest, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, "t", ""), ""},
		{"internal", errors.New("copy the batch into the staging table: 3 rows copied, 5 records read"), ""},
		{"a refusal", outcome.Refused.Mark(ErrTopicChanged), ""},
		{"none", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := retryBeforeCommit("t", tc.err)
			if tc.says == "" {
				if got != tc.err {
					t.Errorf("got %v, want %v unchanged", got, tc.err)
				}
				return
			}
			if k := outcome.Classify(got); k != outcome.Transient || !errors.Is(got, tc.err) {
				t.Errorf("class %v, wraps the error %v, want transient wrapping it: %v", k, errors.Is(got, tc.err), got)
			}
			if !strings.HasSuffix(got.Error(), tc.says) || strings.Count(got.Error(), "nothing was committed") != 1 {
				t.Errorf("%q does not say %q once", got, tc.says)
			}
			if !errors.Is(got, ErrNothingCommitted) || !strings.Contains(Hint(got), "the next batch resumes from the saved positions") {
				t.Errorf("%v: not ErrNothingCommitted, or its hint %q does not say a re-run resumes", got, Hint(got))
			}
		})
	}
}

// TestInDoubtSaysHowTheAnswerWasLost: a COMMIT the run's own timeout gave up
// on is not called a lost connection, and its message says that no cancel
// request was sent, so a COMMIT waiting for a synchronous standby still
// waits (TestCommitWaitsForSynchronousStandby runs it).
func TestInDoubtSaysHowTheAnswerWasLost(t *testing.T) {
	for _, tc := range []struct {
		d    inDoubt
		want string
	}{
		{inDoubt{}, "the connection was lost after COMMIT was sent"},
		{inDoubt{unanswered: 100 * time.Second}, "COMMIT got no answer within 1m40s, so the run closed the connection, without a cancel request " +
			"(a COMMIT waiting for a synchronous standby keeps waiting for it)"},
		{inDoubt{stoppedBy: "terminated signal received"}, "the connection was lost after COMMIT was sent " +
			"(the run was stopped meanwhile, terminated signal received, and waited for the COMMIT's answer)"},
	} {
		if got := tc.d.lost(); got != tc.want {
			t.Errorf("lost() = %q, want %q", got, tc.want)
		}
	}
}
