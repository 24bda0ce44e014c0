package kafkastate

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/changesink/changesink/internal/outcome"
)

// connect opens one connection (the seed's connect_timeout=15 unless the
// DSN sets another).
func connect(ctx context.Context, cc *pgx.ConnConfig) (*pgx.Conn, error) {
	if cc.ConnectTimeout == 0 {
		cc.ConnectTimeout = 15 * time.Second
	}
	cctx, cancel := context.WithTimeout(ctx, cc.ConnectTimeout+time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, cc)
	if err != nil {
		return nil, connectErr(ctx, err)
	}
	return conn, nil
}

// cancelGate keeps pgx from sending a cancel request for a connection once
// its COMMIT is sent. pgx sends one for every connection it loses, or closes
// because a statement's deadline passed (pgconn's asyncClose), and dials it
// through the config's DialFunc. A cancel that reaches a COMMIT waiting for a
// synchronous standby ends the wait and commits on this server alone: the run
// would then report a batch that synchronous_commit says is not committed
// yet. Without it the server completes the COMMIT on its own terms, and the
// in-doubt check (inDoubt.resolve, on a connection of its own) tells which.
//
// Once shut it also keeps the WARNINGs the server sends on the connection:
// a COMMIT whose wait for a synchronous standby someone else cancelled
// (pg_cancel_backend, pg_terminate_backend, a fast shutdown) commits on this
// server alone, and the server says so only in a WARNING before its answer.
type cancelGate struct {
	shut atomic.Bool

	mu       sync.Mutex
	warnings []string
}

// errNoCancelAfterCommit is what the gate answers pgx's cancel dial with.
var errNoCancelAfterCommit = errors.New("no cancel request for a COMMIT in flight")

// config returns a copy of cc whose dials the gate refuses once shut, and
// whose WARNINGs it keeps once shut.
func (g *cancelGate) config(cc *pgx.ConnConfig) *pgx.ConnConfig {
	c := cc.Copy()
	dial := c.DialFunc
	c.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if g.shut.Load() {
			return nil, errNoCancelAfterCommit
		}
		return dial(ctx, network, addr)
	}
	onNotice := c.OnNotice
	c.OnNotice = func(pc *pgconn.PgConn, n *pgconn.Notice) {
		if onNotice != nil {
			onNotice(pc, n)
		}
		if !g.shut.Load() || n.SeverityUnlocalized != "WARNING" {
			return
		}
		w := n.Message
		if n.Detail != "" {
			w += " (" + n.Detail + ")"
		}
		g.mu.Lock()
		g.warnings = append(g.warnings, w)
		g.mu.Unlock()
	}
	return c
}

// reopen lets the connection's cancel requests through again and forgets
// the warnings, once a COMMIT has its answer: the next batch's statements
// may be cancelled as any statement.
func (g *cancelGate) reopen() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.warnings = nil
	g.shut.Store(false)
}

// commitWarnings are the WARNINGs the server sent once COMMIT was sent.
func (g *cancelGate) commitWarnings() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.warnings)
}

// sqlstate is what a PostgreSQL error's SQLSTATE means to kafka-state.
// sqlstateOf is the one table of the SQLSTATEs it acts on: connectErr and
// pgErr give each its class and cause (whose remedy Hint has), and the
// steps that act on one themselves (setup's retry, the merge, the COPY,
// verify's cast, the unknown-topic lookup) add what only they know. outcome.Classify decides
// the SQLSTATEs that are not here (stateOther).
type sqlstate int

const (
	// stateOther: a SQLSTATE kafka-state does not act on, or no
	// PostgreSQL error at all.
	stateOther sqlstate = iota
	// stateLoginRefused: class 28 (invalid authorization specification: a
	// wrong password, no such role) or 3D000 invalid_catalog_name (no such
	// database), answered to a connect.
	stateLoginRefused
	// stateCanceled: 57014 query_canceled, by statement_timeout or by the
	// run's own stop.
	stateCanceled
	// stateLockTimeout: 55P03 lock_not_available, lock_timeout ended a wait
	// for a lock another session holds.
	stateLockTimeout
	// stateIdleTimeout: 25P03 idle_in_transaction_session_timeout.
	stateIdleTimeout
	// stateNoSetup: 42P01 undefined_table, 3F000 invalid_schema_name: setup
	// never ran in this database.
	stateNoSetup
	// stateReadOnly: 25006 read_only_sql_transaction (a standby, or
	// default_transaction_read_only).
	stateReadOnly
	// stateNoPrivilege: 42501 insufficient_privilege.
	stateNoPrivilege
	// stateNotNull: 23502 not_null_violation (also how the MERGE refuses a
	// key stored at another partition: mergeSQL).
	stateNotNull
	// stateConstraint: the other constraint violations, 23514 check, 23503
	// foreign key, 23P01 exclusion, 23001 restrict.
	stateConstraint
	// stateLimitExceeded: 54000 program_limit_exceeded, an index row or a
	// jsonb value too large.
	stateLimitExceeded
	// stateInternal: XX000 internal_error, such as "tuple concurrently
	// updated" (two CREATE OR REPLACE VIEW at once) or "invalid memory
	// alloc request size" (a value past PostgreSQL's 1 GB allocation limit).
	stateInternal
	// stateDuplicate: 23505 unique_violation, 42P06 duplicate_schema, 42P07
	// duplicate_table, 42710 duplicate_object, raised by two concurrent
	// CREATE ... IF NOT EXISTS.
	stateDuplicate
	// stateNotAnInteger: 22P02 invalid_text_representation, 22003
	// numeric_value_out_of_range, raised by a cast to bigint.
	stateNotAnInteger
)

// sqlstateOf returns what err's SQLSTATE means to kafka-state, and the
// PostgreSQL error it is read from (nil when err holds none).
func sqlstateOf(err error) (sqlstate, *pgconn.PgError) {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return stateOther, nil
	}
	if pgerrcode.IsInvalidAuthorizationSpecification(pe.Code) { // class 28
		return stateLoginRefused, pe
	}
	for _, row := range []struct {
		state sqlstate
		codes []string
	}{
		{stateLoginRefused, []string{pgerrcode.InvalidCatalogName}},
		{stateCanceled, []string{pgerrcode.QueryCanceled}},
		{stateLockTimeout, []string{pgerrcode.LockNotAvailable}},
		{stateIdleTimeout, []string{pgerrcode.IdleInTransactionSessionTimeout}},
		{stateNoSetup, []string{pgerrcode.UndefinedTable, pgerrcode.InvalidSchemaName}},
		{stateReadOnly, []string{pgerrcode.ReadOnlySQLTransaction}},
		{stateNoPrivilege, []string{pgerrcode.InsufficientPrivilege}},
		{stateNotNull, []string{pgerrcode.NotNullViolation}},
		{stateConstraint, []string{pgerrcode.CheckViolation, pgerrcode.ForeignKeyViolation, pgerrcode.ExclusionViolation, pgerrcode.RestrictViolation}},
		{stateLimitExceeded, []string{pgerrcode.ProgramLimitExceeded}},
		{stateInternal, []string{pgerrcode.InternalError}},
		{stateDuplicate, []string{pgerrcode.UniqueViolation, pgerrcode.DuplicateSchema, pgerrcode.DuplicateTable, pgerrcode.DuplicateObject}},
		{stateNotAnInteger, []string{pgerrcode.InvalidTextRepresentation, pgerrcode.NumericValueOutOfRange}},
	} {
		if slices.Contains(row.codes, pe.Code) {
			return row.state, pe
		}
	}
	return stateOther, pe
}

// connectErr classifies a failed connect. pgconn's connect errors name host,
// port, user and database, never the password. Authentication failures
// (SQLSTATE class 28), a missing database and a refused certificate are
// configuration errors; a server that does not answer is transient; the
// rest is as pgErr says.
func connectErr(ctx context.Context, err error) error {
	e := &PGError{Op: "connect", Err: err}
	state, pe := sqlstateOf(err)
	switch {
	case state == stateLoginRefused:
		e.SQLState, e.Cause = pe.Code, ErrPGLogin
		return outcome.Config.Mark(e)
	case strings.Contains(err.Error(), "server refused TLS connection"):
		// pgx's untyped error for a server that answered the TLS request
		// with 'N' (ssl = off) under sslmode=require, verify-ca or
		// verify-full: no retry makes it offer TLS.
		e.Cause = ErrPGNoTLS
		return outcome.Config.Mark(e)
	case outcome.TLSFailure(err):
		e.Cause = ErrPGTLS
		return outcome.Config.Mark(e)
	}
	classified := pgErr(ctx, err, "connect")
	if pe == nil && ctx.Err() == nil && outcome.Classify(classified) == outcome.Transient {
		e.Cause = ErrPGUnreachable
		return outcome.Transient.Mark(e)
	}
	return classified
}

// open parses p (PG_DSN with PGUSER and PGPASSWORD) and connects, for the
// commands that need nothing else checked first (setup, verify). Close the
// connection with closeConn.
func (p Postgres) open(ctx context.Context) (*pgx.Conn, error) {
	cc, err := p.connConfig()
	if err != nil {
		return nil, err
	}
	return connect(ctx, cc)
}

// requireUTF8 refuses a database whose encoding is not UTF8, as a
// configuration error: keys reach it through a binary COPY, which
// PostgreSQL stores without converting them (in a LATIN1 database "café"
// would become "cafÃ©", another key than the seed's), and values holding
// text the encoding lacks fail. setup and materialize check it; verify
// compares offsets only.
func requireUTF8(conn *pgx.Conn) error {
	enc := conn.PgConn().ParameterStatus("server_encoding")
	if enc == "UTF8" {
		return nil
	}
	db := conn.Config().Database
	return outcome.Config.Mark(fmt.Errorf("postgresql: database %q has encoding %s: %w", db, enc, ErrNotUTF8Database))
}

func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

func begin(ctx context.Context, conn *pgx.Conn) (pgx.Tx, error) {
	bctx, cancel := context.WithTimeout(ctx, pgTimeout)
	defer cancel()
	tx, err := conn.Begin(bctx)
	if err != nil {
		return nil, pgErr(ctx, err, "begin")
	}
	return tx, nil
}

// execer is what exec and queryRow need: a *pgx.Conn or a pgx.Tx.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func execSQL(ctx context.Context, db execer, what, sql string, args ...any) error {
	qctx, cancel := context.WithTimeout(ctx, pgTimeout)
	defer cancel()
	if _, err := db.Exec(qctx, sql, args...); err != nil {
		return pgErr(ctx, err, what)
	}
	return nil
}

// queryRow scans one row; pgx.ErrNoRows is returned as is.
func queryRow(ctx context.Context, db execer, what, sql string, args []any, dest ...any) error {
	qctx, cancel := context.WithTimeout(ctx, pgTimeout)
	defer cancel()
	err := db.QueryRow(qctx, sql, args...).Scan(dest...)
	if err == nil || errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	return pgErr(ctx, err, what)
}

// pgErr wraps a PostgreSQL error with what was being done (a *PGError). A
// statement timeout (query_canceled after statement_timeout), a lock
// timeout (a lock another session holds, past lock_timeout) and a session
// ended for idling in its transaction are transient like a lost
// connection, each with its cause; a missing schema or table (setup never
// ran in this database), missing privileges, a read-only server or
// database and a constraint added to setup's tables by hand are
// configuration errors; outcome.Classify handles the rest by SQLSTATE.
func pgErr(ctx context.Context, err error, what string) error {
	e := &PGError{Op: what, Err: err}
	state, pe := sqlstateOf(err)
	if pe != nil {
		e.SQLState = pe.Code
	}
	switch state {
	case stateCanceled:
		if ctx.Err() == nil { // statement_timeout, not a stop
			e.Cause = ErrPGStatementTimeout
			return outcome.Transient.Mark(e)
		}
	case stateLockTimeout:
		e.Cause = ErrPGLockTimeout
		return outcome.Transient.Mark(e)
	case stateIdleTimeout:
		e.Cause = ErrPGIdleTimeout
		return outcome.Transient.Mark(e)
	case stateNoSetup:
		e.Cause = ErrNotSetUp
		return outcome.Config.Mark(e)
	case stateReadOnly:
		e.Cause = ErrPGReadOnly
		return outcome.Config.Mark(e)
	case stateNoPrivilege:
		e.Cause = ErrPGPrivileges
		return outcome.Config.Mark(e)
	case stateNotNull, stateConstraint:
		if setupOwns(pe) {
			// changesink broke a rule of its own tables (the merge's
			// moved-key NULL is caught before this): a bug, internal.
			return e
		}
		// changesink writes only the columns setup makes, in the forms they
		// take: a constraint it breaks was added to the table by hand.
		e.Cause = fmt.Errorf("%s has %w%s", pgTable(pe), ErrAddedConstraint, pgConstraint(pe))
		return outcome.Config.Mark(e)
	}
	return e
}

// setupOwns reports a constraint error on a rule kafka-state setup made
// itself: a NOT NULL column or a CHECK of its tables (sql.go; the names are
// PostgreSQL's defaults for that DDL, which TestSetupOwnsItsRules reads
// back from a real server), or anything of the session's staging table.
func setupOwns(pe *pgconn.PgError) bool {
	if pe.TableName == stagingTable {
		return true
	}
	if pe.SchemaName != "kafka_state" {
		return false
	}
	if state, _ := sqlstateOf(pe); state == stateNotNull {
		switch pe.TableName + "." + pe.ColumnName {
		case "records.topic", "records.record_key", "records.deleted", "records.kafka_offset", "records.kafka_partition",
			"positions.topic", "positions.next_offsets", "positions.updated_at", "positions.cluster_id", "positions.topic_id",
			"shards.topic", "shards.kafka_partition",
			"rejected.topic", "rejected.kafka_partition", "rejected.kafka_offset", "rejected.error", "rejected.rejected_at":
			return true
		}
		return false
	}
	switch pe.ConstraintName {
	case "records_check", "records_kafka_offset_check":
		return true
	}
	return false
}

// pgTable names the table of a constraint error, schema-qualified when the
// server says so.
func pgTable(pe *pgconn.PgError) string {
	switch {
	case pe.TableName == "":
		return "the table"
	case pe.SchemaName == "":
		return pe.TableName
	}
	return pe.SchemaName + "." + pe.TableName
}

// pgConstraint names the constraint or the column of a constraint error.
func pgConstraint(pe *pgconn.PgError) string {
	switch {
	case pe.ConstraintName != "":
		return fmt.Sprintf(" (constraint %q)", pe.ConstraintName)
	case pe.ColumnName != "":
		return fmt.Sprintf(" (column %q)", pe.ColumnName)
	}
	return ""
}
