package outcome

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

var errSentinel = errors.New("sentinel")

func TestClassify(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want Kind
	}{
		{"nil", nil, OK},
		{"refused", Refused.Mark(errSentinel), Refused},
		{"config", Config.Mark(errSentinel), Config},
		{"transient", Transient.Mark(errSentinel), Transient},
		{"marked deep inside wrap", fmt.Errorf("outer: %w", Refused.Mark(errSentinel)), Refused},
		{"outermost mark wins", Config.Mark(fmt.Errorf("x: %w", Transient.Mark(errSentinel))), Config},
		{"deadline", fmt.Errorf("fetch: %w", context.DeadlineExceeded), Transient},
		{"canceled", context.Canceled, Transient},
		{"unexpected eof", io.ErrUnexpectedEOF, Transient},
		{"connection refused", fmt.Errorf("dial: %w", syscall.ECONNREFUSED), Transient},
		{"pg terminated (pg_terminate_backend)", &pgconn.PgError{Code: pgerrcode.AdminShutdown}, Transient},
		{"pg crash shutdown", &pgconn.PgError{Code: pgerrcode.CrashShutdown}, Transient},
		{"pg starting up", &pgconn.PgError{Code: pgerrcode.CannotConnectNow}, Transient},
		{"pg connection failure", &pgconn.PgError{Code: pgerrcode.ConnectionFailure}, Transient},
		{"pg serialization", fmt.Errorf("commit: %w", &pgconn.PgError{Code: pgerrcode.SerializationFailure}), Transient},
		{"pg deadlock", &pgconn.PgError{Code: pgerrcode.DeadlockDetected}, Transient},
		{"pg too many connections", &pgconn.PgError{Code: pgerrcode.TooManyConnections}, Transient},
		{"pg idle in transaction too long", &pgconn.PgError{Code: pgerrcode.IdleInTransactionSessionTimeout}, Transient},
		{"pg idle session too long", &pgconn.PgError{Code: pgerrcode.IdleSessionTimeout}, Transient},
		{"pg syntax", &pgconn.PgError{Code: pgerrcode.SyntaxError}, Internal},
		{"pg statement timeout (the task decides)", &pgconn.PgError{Code: pgerrcode.QueryCanceled}, Internal},
		{"pg password refused (the task decides)", &pgconn.PgError{Code: pgerrcode.InvalidPassword}, Internal},
		{"pg class 80 is not class 08", &pgconn.PgError{Code: "80000"}, Internal},
		{"plain", errSentinel, Internal},
		{"file permission", fmt.Errorf("publish: %w", &fs.PathError{Op: "rename", Path: "x", Err: syscall.EACCES}), Internal},
		{"bare errno that is not a network fault", fmt.Errorf("x: %w", syscall.EISDIR), Internal},
		{"network op", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.EHOSTUNREACH}, Transient},
		{"dial refused inside a path error", &fs.PathError{Op: "dial", Path: "x", Err: syscall.ECONNREFUSED}, Transient},
		{"untrusted certificate inside a net error", &net.OpError{Op: "write", Net: "tcp",
			Err: &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}}, Config},
		{"certificate for another host", fmt.Errorf("dial: %w", x509.HostnameError{Certificate: &x509.Certificate{}, Host: "h"}), Config},
		{"expired certificate", x509.CertificateInvalidError{Reason: x509.Expired}, Config},
		{"plaintext server on a TLS dial", fmt.Errorf("handshake: %w", tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}), Config},
		{"alert from the peer (client certificate refused)", &net.OpError{Op: "remote error", Net: "tcp", Err: errSentinel}, Config},
		{"a read error that is not an alert", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, Transient},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Classify(tt.err); got != tt.want {
				t.Errorf("Classify(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestMarkKeepsChain(t *testing.T) {
	err := Refused.Mark(fmt.Errorf("lock: %w", errSentinel))
	if !errors.Is(err, errSentinel) {
		t.Fatalf("errors.Is lost the sentinel through the mark")
	}
	if got, want := err.Error(), "lock: sentinel"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
}

func TestMarkOKIsInternal(t *testing.T) {
	if got := Classify(OK.Mark(errSentinel)); got != Internal {
		t.Errorf("Classify(OK.Mark(err)) = %v, want internal: a failure is never OK", got)
	}
	if err := Refused.Mark(nil); err != nil {
		t.Errorf("Refused.Mark(nil) = %v, want nil", err)
	}
}

func TestExitCodes(t *testing.T) {
	for k, want := range map[Kind]int{OK: 0, Refused: 1, Config: 2, Transient: 3, Internal: 4} {
		if got := k.ExitCode(); got != want {
			t.Errorf("%v.ExitCode() = %d, want %d", k, got, want)
		}
	}
}

// TestStopped: only a cancellation or deadline of a context that has ended
// is the run's own stop.
func TestStopped(t *testing.T) {
	live := context.Background()
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"the stop", stopped, fmt.Errorf("read: %w", context.Canceled), true},
		{"a deadline after the stop", stopped, context.DeadlineExceeded, true},
		{"another error after the stop", stopped, errSentinel, false},
		{"no error", stopped, nil, false},
		{"a statement's own deadline, the run going on", live, context.DeadlineExceeded, false},
	} {
		if got := Stopped(tc.ctx, tc.err); got != tc.want {
			t.Errorf("%s: Stopped = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestStopCause: a stop's message names the signal cmd/changesink cancelled
// the run with, and otherwise what can stop a run.
func TestStopCause(t *testing.T) {
	signalled, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("interrupt signal received"))
	plain, cancelPlain := context.WithCancel(context.Background())
	cancelPlain()
	timedOut, cancelTimeout := context.WithTimeout(context.Background(), 0)
	defer cancelTimeout()
	for name, tc := range map[string]struct {
		ctx  context.Context
		want string
	}{
		"signal":    {signalled, "interrupt signal received"},
		"cancelled": {plain, "a stop signal, SIGTERM or SIGINT, or the task's timeout"},
		"deadline":  {timedOut, "a stop signal, SIGTERM or SIGINT, or the task's timeout"},
	} {
		if got := StopCause(tc.ctx); got != tc.want {
			t.Errorf("%s: StopCause = %q, want %q", name, got, tc.want)
		}
	}
}
