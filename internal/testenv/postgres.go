package testenv

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// WithDatabase returns the connection URL dsn with its database replaced by
// name (user, password, host and parameters kept).
func WithDatabase(t testing.TB, dsn, name string) string {
	t.Helper()
	return withURL(t, dsn, func(u *url.URL) { u.Path = "/" + name })
}

// WithParams returns the connection URL dsn with the query parameters set
// (sslmode, sslrootcert, ...), each replacing any value it had.
func WithParams(t testing.TB, dsn string, params map[string]string) string {
	t.Helper()
	return withURL(t, dsn, func(u *url.URL) {
		q := u.Query()
		for k, v := range params {
			q.Set(k, v)
		}
		u.RawQuery = q.Encode()
	})
}

// WithHost returns the connection URL dsn with its host and port replaced
// by hostport (a proxy's address, for one).
func WithHost(t testing.TB, dsn, hostport string) string {
	t.Helper()
	return withURL(t, dsn, func(u *url.URL) { u.Host = hostport })
}

// WithUser returns the connection URL dsn with user as its user and no
// password: the PG_DSN a flow passes when PGUSER and PGPASSWORD carry the
// credentials.
func WithUser(t testing.TB, dsn, user string) string {
	t.Helper()
	return withURL(t, dsn, func(u *url.URL) { u.User = url.User(user) })
}

// WithPassword returns the connection URL dsn with its user's password
// replaced by password.
func WithPassword(t testing.TB, dsn, password string) string {
	t.Helper()
	return withURL(t, dsn, func(u *url.URL) { u.User = url.UserPassword(u.User.Username(), password) })
}

func withURL(t testing.TB, dsn string, change func(*url.URL)) string {
	t.Helper()
	if _, err := pgx.ParseConfig(dsn); err != nil {
		t.Fatalf("not a PostgreSQL connection string: %v", err)
	}
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("not a postgres:// URL (the test services' DSNs are): %q", redactedScheme(dsn))
	}
	change(u)
	return u.String()
}

func redactedScheme(dsn string) string {
	if u, err := url.Parse(dsn); err == nil {
		return u.Redacted()
	}
	return "(unparsable)"
}

// CreateRole creates a login role with a password through the admin
// connection adminDSN, and drops it when the test ends (after what was
// created later, such as a database it owns).
func CreateRole(t testing.TB, adminDSN, name, password string) {
	t.Helper()
	adminExec(t, adminDSN, "CREATE ROLE "+pgx.Identifier{name}.Sanitize()+" LOGIN PASSWORD "+literal(password))
	t.Cleanup(func() { adminCleanup(t, adminDSN, "DROP ROLE IF EXISTS "+pgx.Identifier{name}.Sanitize()) })
}

// DatabaseOptions are what CreateDatabaseWith sets on a new database.
type DatabaseOptions struct {
	// Owner owns the database ("": the admin role).
	Owner string
	// Encoding is the database's encoding, such as LATIN1 ("": the
	// template's, UTF8 on the test servers). A database with an encoding of
	// its own is made from template0 with the C locale, which takes every
	// encoding.
	Encoding string
}

// CreateDatabase is CreateDatabaseWith owned by owner (the admin role when
// owner is "").
func CreateDatabase(t testing.TB, adminDSN, name, owner string) string {
	t.Helper()
	return CreateDatabaseWith(t, adminDSN, name, DatabaseOptions{Owner: owner})
}

// CreateDatabaseWith creates database name with opts through the admin
// connection adminDSN, drops it when the test ends (WITH (FORCE): open
// sessions do not keep it), and returns adminDSN pointed at it.
func CreateDatabaseWith(t testing.TB, adminDSN, name string, opts DatabaseOptions) string {
	t.Helper()
	sql := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if opts.Owner != "" {
		sql += " OWNER " + pgx.Identifier{opts.Owner}.Sanitize()
	}
	if opts.Encoding != "" {
		sql += " ENCODING " + literal(opts.Encoding) + " LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0"
	}
	dsn := WithDatabase(t, adminDSN, name)
	adminExec(t, adminDSN, sql)
	t.Cleanup(func() {
		adminCleanup(t, adminDSN, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	})
	return dsn
}

// literal quotes s as an SQL string literal.
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func adminExec(t testing.TB, adminDSN, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, adminDSN)
	if err != nil {
		t.Fatalf("connect to the test PostgreSQL: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%.40s...: %v", sql, err)
	}
}

// adminCleanup runs a drop when the test ends; a failure is reported, not
// fatal (the test's own result stands).
func adminCleanup(t testing.TB, adminDSN, sql string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, adminDSN)
	if err != nil {
		t.Errorf("%s: connect: %v", sql, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Errorf("%s: %v", sql, err)
	}
}
