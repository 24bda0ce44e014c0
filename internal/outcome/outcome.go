// Package outcome classifies a failed run into the kinds an operator acts on,
// and maps each kind to changesink's documented exit code.
//
// Tasks mark their errors with the kind: Refused.Mark(err), Config.Mark(err),
// Transient.Mark(err). Classify also recognises driver errors that are
// transient by nature (network errors, timeouts, PostgreSQL connection-class
// SQLSTATEs, a terminated backend, serialization failures). Anything else is
// Internal: the run failed for a reason changesink did not foresee, which is
// a bug to report. A failed run has committed nothing, unless its message
// says otherwise: a kafka-state COMMIT whose answer was lost (in doubt), a
// cdc run that failed after its insert (a re-run converges).
package outcome

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"syscall"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// Kind is the class of a failure.
type Kind int

// The kinds, in exit-code order.
const (
	// OK is not a failure.
	OK Kind = iota
	// Refused: the input or the stored state is unsafe; nothing was changed.
	// The operator reads the message, repairs, and re-runs.
	Refused
	// Config: a usage or configuration error; fix the flow or the secret.
	Config
	// Transient: a service was unreachable, timed out or dropped the
	// connection; a retry may succeed (nothing was committed, unless the
	// message says otherwise).
	Transient
	// Internal: an unexpected failure, a bug to report.
	Internal
)

// String returns the name used in the error_class output.
func (k Kind) String() string {
	switch k {
	case OK:
		return "ok"
	case Refused:
		return "refused"
	case Config:
		return "config"
	case Transient:
		return "transient"
	default:
		return "internal"
	}
}

// ExitCode returns the process exit code for k: 0 ok, 1 refused, 2 config,
// 3 transient, 4 internal.
func (k Kind) ExitCode() int { return int(k) }

// Error marks an error with a Kind. It unwraps to the marked error, so
// errors.Is and errors.As still find sentinels and typed errors beneath it.
type Error struct {
	Kind Kind
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Mark returns err marked with k, so Classify returns k for it and for any
// error that wraps it: outcome.Refused.Mark(err). A nil err stays nil.
// Marking with OK would call a failure a success, so OK marks Internal.
func (k Kind) Mark(err error) error {
	if err == nil {
		return nil
	}
	if k == OK {
		k = Internal
	}
	return &Error{Kind: k, Err: err}
}

// Stopped reports err as the run's own stop: ctx has ended (SIGTERM, or
// the task's timeout) and err is that cancellation or deadline, so the
// caller can say what the stop left.
func Stopped(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded))
}

// StopCause says what ended ctx, for a stop's message: the cause it was
// cancelled with (cmd/changesink cancels on SIGTERM, how Kestra stops a
// task, and SIGINT, with signal.NotifyContext's "terminated signal
// received" or "interrupt signal received"), else what can stop a run.
func StopCause(ctx context.Context) string {
	if cause := context.Cause(ctx); cause != nil && cause != ctx.Err() {
		return cause.Error()
	}
	return "a stop signal, SIGTERM or SIGINT, or the task's timeout"
}

// Classify returns the Kind of err: the outermost explicit mark wins;
// otherwise a TLS handshake that cannot succeed as configured (TLSFailure)
// is Config; network errors, deadlines, unexpected EOFs and PostgreSQL errors
// whose SQLSTATE is transient (pgTransient) are Transient, and so is a
// cancelled context (the run was stopped, nothing was committed); a
// file-system error is Internal. Everything else is Internal.
func Classify(err error) Kind {
	if err == nil {
		return OK
	}
	var marked *Error
	if errors.As(err, &marked) {
		return marked.Kind
	}
	// Before the network checks: a refused certificate arrives inside a
	// net.OpError or a pgconn.ConnectError, and no retry cures it.
	if TLSFailure(err) {
		return Config
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.ETIMEDOUT) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed) {
		return Transient
	}
	// A file-system error (permission, no such file, a directory where a
	// file should be) is not cured by a retry. Checked before net.Error,
	// which every syscall.Errno satisfies.
	var pathErr *fs.PathError
	var linkErr *os.LinkError
	if errors.As(err, &pathErr) || errors.As(err, &linkErr) {
		return Internal
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		if pgTransient(pgErr.Code) {
			return Transient
		}
		return Internal
	}
	if pgconn.SafeToRetry(err) || pgconn.Timeout(err) {
		return Transient
	}
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return Transient
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		if _, bare := netErr.(syscall.Errno); !bare {
			return Transient
		}
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		return Transient
	}
	return Internal
}

// pgTransient reports whether a PostgreSQL error with this SQLSTATE may
// succeed when the run is retried: a connection exception (class 08), the
// server shutting down or the backend terminated (57P01 admin_shutdown, as
// pg_terminate_backend sends it; 57P02; 57P03 cannot_connect_now), a
// serialization failure or deadlock (40001, 40P01), too many connections
// (53300), a session the server ended for idling (25P03
// idle_in_transaction_session_timeout, 57P05 idle_session_timeout). These
// are the codes every task treats alike; the tasks decide the others
// themselves (configuration errors, refusals), because each names what to
// fix.
func pgTransient(code string) bool {
	switch code {
	case pgerrcode.AdminShutdown, pgerrcode.CrashShutdown, pgerrcode.CannotConnectNow,
		pgerrcode.SerializationFailure, pgerrcode.DeadlockDetected, pgerrcode.TooManyConnections,
		pgerrcode.IdleInTransactionSessionTimeout, pgerrcode.IdleSessionTimeout:
		return true
	}
	return pgerrcode.IsConnectionException(code)
}

// TLSFailure reports a TLS handshake that cannot succeed as configured: the
// server's certificate is not trusted (unknown authority), names another
// host, is expired or otherwise invalid; the peer answered with a TLS alert
// (it refused the client's certificate, or requires one), whether the
// handshake or the first read after it (TLS 1.3) got it; or the server does
// not speak TLS at all (a plaintext port). A retry does not help; the
// configuration (CA, host name, port, client certificate) must change.
func TLSFailure(err error) bool {
	var (
		header    tls.RecordHeaderError
		verify    *tls.CertificateVerificationError
		alert     tls.AlertError
		authority x509.UnknownAuthorityError
		host      x509.HostnameError
		invalid   x509.CertificateInvalidError
		op        *net.OpError
	)
	// crypto/tls reports an alert the peer sent (bad_certificate,
	// certificate_required, unknown_ca, ...) as a *net.OpError with Op
	// "remote error" around its unexported alert type.
	return errors.As(err, &header) || errors.As(err, &verify) || errors.As(err, &alert) ||
		errors.As(err, &authority) || errors.As(err, &host) || errors.As(err, &invalid) ||
		(errors.As(err, &op) && op.Op == "remote error")
}
