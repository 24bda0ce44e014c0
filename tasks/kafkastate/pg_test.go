package kafkastate

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
)

// TestPGErrorClasses: the SQLSTATEs kafka-state decides itself, each with
// its class and cause (whose remedy the hint gives); the rest is left to
// outcome.Classify, with no cause.
func TestPGErrorClasses(t *testing.T) {
	live := context.Background()
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name    string
		ctx     context.Context
		connect bool // through connectErr (the connect path), else pgErr
		err     error
		want    outcome.Kind
		is      error // the cause, nil for none
		says    string
	}{
		{"statement timeout", live, false, &pgconn.PgError{Code: pgerrcode.QueryCanceled}, outcome.Transient, ErrPGStatementTimeout, "pg_locks"},
		{"lock timeout: a lock held by another session", live, false, &pgconn.PgError{Code: pgerrcode.LockNotAvailable}, outcome.Transient, ErrPGLockTimeout, "pg_locks"},
		{"cancelled by a stop", stopped, false, &pgconn.PgError{Code: pgerrcode.QueryCanceled}, outcome.Internal, nil, ""},
		{"no table: setup never ran", live, false, &pgconn.PgError{Code: pgerrcode.UndefinedTable}, outcome.Config, ErrNotSetUp, "kafka-state setup"},
		{"no schema: setup never ran", live, false, &pgconn.PgError{Code: pgerrcode.InvalidSchemaName}, outcome.Config, ErrNotSetUp, "kafka-state setup"},
		{"read-only server", live, false, &pgconn.PgError{Code: pgerrcode.ReadOnlySQLTransaction}, outcome.Config, ErrPGReadOnly, "point it at the primary"},
		{"missing privileges", live, false, &pgconn.PgError{Code: pgerrcode.InsufficientPrivilege}, outcome.Config, ErrPGPrivileges, "Grant the PG_DSN role"},
		{"idle in transaction too long", live, false, &pgconn.PgError{Code: pgerrcode.IdleInTransactionSessionTimeout}, outcome.Transient, ErrPGIdleTimeout,
			"idle_in_transaction_session_timeout"},
		{"terminated backend", live, false, &pgconn.PgError{Code: pgerrcode.AdminShutdown}, outcome.Transient, nil, ""},
		{"a CHECK added by hand", live, false, &pgconn.PgError{Code: pgerrcode.CheckViolation, SchemaName: "kafka_state", TableName: "records", ConstraintName: "has_id"},
			outcome.Config, ErrAddedConstraint, `(kafka_state.records has a constraint or column kafka-state setup does not make (constraint "has_id"))`},
		{"a NOT NULL column added by hand", live, false, &pgconn.PgError{Code: pgerrcode.NotNullViolation, SchemaName: "kafka_state", TableName: "records", ColumnName: "note"},
			outcome.Config, ErrAddedConstraint, `(kafka_state.records has a constraint or column kafka-state setup does not make (column "note"))`},
		{"the merge's moved-key NULL: a bug when not caught", live, false, &pgconn.PgError{Code: pgerrcode.NotNullViolation, SchemaName: "kafka_state", TableName: "records", ColumnName: "record_key"},
			outcome.Internal, nil, ""},
		{"setup's own CHECK: a bug", live, false, &pgconn.PgError{Code: pgerrcode.CheckViolation, SchemaName: "kafka_state", TableName: "records", ConstraintName: "records_check"},
			outcome.Internal, nil, ""},
		{"the staging table: a bug", live, false, &pgconn.PgError{Code: pgerrcode.NotNullViolation, SchemaName: "pg_temp_3", TableName: stagingTable, ColumnName: "payload"},
			outcome.Internal, nil, ""},
		{"syntax error", live, false, &pgconn.PgError{Code: pgerrcode.SyntaxError}, outcome.Internal, nil, ""},
		{"not a pg error", live, false, fmt.Errorf("x"), outcome.Internal, nil, ""},
		{"connect: wrong password", live, true, &pgconn.PgError{Code: pgerrcode.InvalidPassword}, outcome.Config, ErrPGLogin, "Check PG_DSN, PGUSER and PGPASSWORD"},
		{"connect: no such role", live, true, &pgconn.PgError{Code: pgerrcode.InvalidAuthorizationSpecification}, outcome.Config, ErrPGLogin, "Check PG_DSN"},
		{"connect: no such database", live, true, &pgconn.PgError{Code: pgerrcode.InvalidCatalogName}, outcome.Config, ErrPGLogin, "Check PG_DSN"},
		{"connect: untrusted certificate", live, true, fmt.Errorf("tls: %w", x509.UnknownAuthorityError{}), outcome.Config, ErrPGTLS, "sslrootcert"},
		{"connect: server without TLS", live, true, fmt.Errorf("failed to connect: tls error: %w", errors.New("server refused TLS connection")), outcome.Config, ErrPGNoTLS,
			"does not offer TLS"},
		{"connect: server starting up", live, true, &pgconn.PgError{Code: pgerrcode.CannotConnectNow}, outcome.Transient, nil, ""},
		{"connect: nothing listening", live, true, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, outcome.Transient, ErrPGUnreachable,
			"PostgreSQL did not answer at the host and port PG_DSN names"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got error
			if tt.connect {
				got = connectErr(tt.ctx, tt.err)
			} else {
				got = pgErr(tt.ctx, tt.err, "test")
			}
			testenv.CheckHinted(t, got, Hint, tt.want, tt.is, tt.says)
			var pe *PGError
			if !errors.As(got, &pe) || !errors.Is(got, tt.err) {
				t.Fatalf("%v is not a *PGError wrapping %v", got, tt.err)
			}
			var driver *pgconn.PgError
			if errors.As(tt.err, &driver) && pe.SQLState != driver.Code {
				t.Errorf("SQLState %q, want %q", pe.SQLState, driver.Code)
			}
			if (tt.is == nil) != (Hint(got) == "") {
				t.Errorf("cause %v, hint %q: a hint without a cause or a cause without one", tt.is, Hint(got))
			}
		})
	}
}

// TestValueTooLargeDecision: which COPY errors refuse a value as too large
// for jsonb (TestValueTooLargeForJSONB hits the XX000 one on the real
// server; a 54000 needs a string over 256 MB).
func TestValueTooLargeDecision(t *testing.T) {
	where := "COPY " + stagingTable + ", line 3, column payload"
	for _, tc := range []struct {
		name string
		err  error
		line int // 0: not this refusal
	}{
		{"string too long", &pgconn.PgError{Code: pgerrcode.ProgramLimitExceeded, Message: "string too long to represent as jsonb string", Where: where}, 3},
		{"allocation limit", &pgconn.PgError{Code: pgerrcode.InternalError, Message: "invalid memory alloc request size 1073741824", Where: where}, 3},
		{"wrapped", fmt.Errorf("x: %w", &pgconn.PgError{Code: pgerrcode.ProgramLimitExceeded, Where: "COPY " + stagingTable + ", line 12, column payload: \"[0,0\""}), 12},
		{"another internal error", &pgconn.PgError{Code: pgerrcode.InternalError, Message: "tuple concurrently updated", Where: where}, 0},
		{"not on the payload", &pgconn.PgError{Code: pgerrcode.ProgramLimitExceeded, Where: "COPY " + stagingTable + ", line 3, column record_key"}, 0},
		{"not in the COPY", &pgconn.PgError{Code: pgerrcode.ProgramLimitExceeded}, 0},
		{"not a pg error", fmt.Errorf("x"), 0},
	} {
		_, line, ok := valueTooLarge(tc.err)
		if ok != (tc.line > 0) || line != tc.line {
			t.Errorf("%s: valueTooLarge = line %d, %v; want line %d", tc.name, line, ok, tc.line)
		}
	}
}
