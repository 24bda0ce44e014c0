package kafkastate

// PostgreSQL targets that are configuration errors (exit 2, saying what to
// fix), not internal ones: a database where setup never ran, a role without
// the privileges, a read-only server or database. pg_test.go holds the
// SQLSTATE decisions behind them without a server.

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
)

// TestNoSchemaOrNoPrivileges: materialize and verify against a
// database where setup never ran (a PG_DSN naming the wrong database), or
// as a role without privileges on schema kafka_state, failed with
// PostgreSQL's error as an internal error (exit 4, "please report it").
// Both are configuration errors (exit 2) that say what to do.
func TestNoSchemaOrNoPrivileges(t *testing.T) {
	e := newTopicEnv(t, 1)
	produce(t, e.kcl, e.topic, kv(0, "a", `{"v":1}`))
	check := func(name string, err error, is error, want string) {
		t.Helper()
		t.Log(name)
		testenv.CheckHinted(t, err, Hint, outcome.Config, is, want)
	}

	bare := Postgres{DSN: testenv.CreateDatabase(t, e.adminPG, testenv.UniqueName(t, "ks_"), "")}
	cfg := e.config()
	cfg.Postgres = bare
	_, err := e.run(t, cfg, hooks{})
	check("materialize without setup", err, ErrNotSetUp, "kafka-state setup")
	_, err = Verify(testCtx(t, time.Minute), bare, e.topic)
	check("verify without setup", err, ErrNotSetUp, "kafka-state setup")

	role := testenv.UniqueName(t, "ks_")
	testenv.CreateRole(t, e.adminPG, role, "breaker-pw")
	cc, err := pgx.ParseConfig(e.pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	unprivileged := Postgres{DSN: fmt.Sprintf("host=%s port=%d dbname=%s sslmode=disable", cc.Host, cc.Port, cc.Database), User: role, Password: "breaker-pw"}
	cfg.Postgres = unprivileged
	_, err = e.run(t, cfg, hooks{})
	check("materialize without privileges", err, ErrPGPrivileges, "privileges")
	_, err = Verify(testCtx(t, time.Minute), unprivileged, e.topic)
	check("verify without privileges", err, ErrPGPrivileges, "privileges")
}

// TestReadOnlyDatabase: a PG_DSN pointing at a read-only server (a
// standby) or database failed setup and materialize as internal errors
// (exit 4). Both are configuration errors saying so.
func TestReadOnlyDatabase(t *testing.T) {
	e := newTopicEnv(t, 1)
	produce(t, e.kcl, e.topic, kv(0, "a", `{"v":1}`))
	e.setDatabase(t, `default_transaction_read_only = on`)
	_, err := Setup(testCtx(t, time.Minute), e.pg)
	testenv.CheckHinted(t, err, Hint, outcome.Config, ErrPGReadOnly, "read-only")
	_, err = e.run(t, e.config(), hooks{})
	testenv.CheckHinted(t, err, Hint, outcome.Config, ErrPGReadOnly, "read-only")
}

// TestTableAlteredByHand: a constraint or a NOT NULL column added to
// kafka_state.records by hand made a batch fail as an internal error
// (exit 4, "please report it"). It is a configuration error naming the
// table and the constraint or column, nothing is committed, and the run
// after the change is undone commits the batch.
func TestTableAlteredByHand(t *testing.T) {
	for _, tc := range []struct{ name, alter, undo, says string }{
		{"a CHECK", `ALTER TABLE kafka_state.records ADD CONSTRAINT has_id CHECK (deleted OR payload ? 'id')`,
			`ALTER TABLE kafka_state.records DROP CONSTRAINT has_id`, `(constraint "has_id")`},
		{"a NOT NULL column", `ALTER TABLE kafka_state.records ADD COLUMN note text NOT NULL DEFAULT 'x'; ALTER TABLE kafka_state.records ALTER COLUMN note DROP DEFAULT`,
			`ALTER TABLE kafka_state.records DROP COLUMN note`, `(column "note")`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTopicEnv(t, 1)
			produce(t, e.kcl, e.topic, kv(0, "a", `{"id":1}`))
			e.mustRun(t)
			e.exec(t, tc.alter)
			produce(t, e.kcl, e.topic, kv(0, "b", `{"v":2}`))
			before := e.snapshot(t)
			_, err := e.run(t, e.config(), hooks{})
			testenv.CheckHinted(t, err, Hint, outcome.Config, ErrAddedConstraint, "kafka_state.records has a constraint or column kafka-state setup does not make "+tc.says,
				"Nothing was committed")
			e.exec(t, tc.undo)
			e.committedNothingThenConverges(t, before, 1)
		})
	}
}

// TestSetupOwnsItsRules: setupOwns knows every NOT NULL column and CHECK
// constraint setup makes, as a real server names them, so that changesink
// breaking one of them is internal (a bug), never "added by hand"; a rule
// added by hand is not setup's.
func TestSetupOwnsItsRules(t *testing.T) {
	e := newTopicEnv(t, 1)
	ctx := testCtx(t, time.Minute)
	rows, err := e.conn(t).Query(ctx, `
		SELECT c.relname, a.attname, '' FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
		WHERE c.relnamespace = 'kafka_state'::regnamespace AND c.relkind = 'r' AND a.attnum > 0 AND a.attnotnull AND NOT a.attisdropped
		UNION ALL
		SELECT c.relname, '', k.conname FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
		WHERE k.connamespace = 'kafka_state'::regnamespace AND k.contype = 'c'`)
	if err != nil {
		t.Fatal(err)
	}
	var rules []*pgconn.PgError
	for rows.Next() {
		pe := &pgconn.PgError{SchemaName: "kafka_state", Code: pgerrcode.NotNullViolation}
		if err := rows.Scan(&pe.TableName, &pe.ColumnName, &pe.ConstraintName); err != nil {
			t.Fatal(err)
		}
		if pe.ConstraintName != "" {
			pe.Code = pgerrcode.CheckViolation
		}
		rules = append(rules, pe)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(rules) < 12 {
		t.Fatalf("read %d rules of setup's tables, want at least 12 (10 NOT NULL columns, 2 CHECKs)", len(rules))
	}
	for _, pe := range rules {
		if !setupOwns(pe) {
			t.Errorf("setupOwns does not know setup's %s.%s%s", pe.TableName, pe.ColumnName, pe.ConstraintName)
		}
	}
	for _, pe := range []*pgconn.PgError{
		{SchemaName: "kafka_state", TableName: "records", Code: pgerrcode.NotNullViolation, ColumnName: "payload"},
		{SchemaName: "kafka_state", TableName: "records", Code: pgerrcode.NotNullViolation, ColumnName: "note"},
		{SchemaName: "kafka_state", TableName: "records", Code: pgerrcode.CheckViolation, ConstraintName: "has_id"},
	} {
		if setupOwns(pe) {
			t.Errorf("setupOwns claims a rule added by hand: %s.%s%s", pe.TableName, pe.ColumnName, pe.ConstraintName)
		}
	}
}

// TestNonUTF8Database: a database whose encoding is not UTF8. The batch's
// COPY sends keys in binary, which PostgreSQL stores without converting:
// in a LATIN1 database the key "café" became the five characters "cafÃ©"
// (a different key from the seed's, so its updates and tombstones went to
// another row), the run exited 0; a value holding "€" failed the COPY as an
// internal error (exit 4) naming no record. setup and materialize refuse
// such a database up front, as a configuration error naming its encoding.
func TestNonUTF8Database(t *testing.T) {
	e := newTopicEnv(t, 1)
	produce(t, e.kcl, e.topic, kv(0, "café", `{"v":"café"}`))

	latin1 := Postgres{DSN: testenv.CreateDatabaseWith(t, e.adminPG, testenv.UniqueName(t, "ks_latin1_"), testenv.DatabaseOptions{Encoding: "LATIN1"})}
	ctx := testCtx(t, time.Minute)

	check := func(what string, err error) {
		t.Helper()
		t.Log(what)
		testenv.CheckHinted(t, err, Hint, outcome.Config, ErrNotUTF8Database, "LATIN1", "UTF8")
	}
	_, err := Setup(ctx, latin1)
	check("setup", err)

	// A database the seed's DDL made (the seed ran on it).
	conn, err := pgx.Connect(ctx, latin1.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, stmt := range ddl {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	cfg := e.config()
	cfg.Postgres = latin1
	_, err = e.run(t, cfg, hooks{})
	check("materialize", err)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM kafka_state.records`).Scan(&n); err != nil || n != 0 {
		t.Errorf("records after a refused run: %d (%v), want 0", n, err)
	}
}

// refuseTLS carries one connection to PostgreSQL the way a server with
// ssl = off answers it: an SSLRequest gets 'N', everything else passes.
func refuseTLS(_ *testenv.Proxy, client, server net.Conn) {
	defer client.Close()
	defer server.Close()
	head := make([]byte, 8)
	if _, err := io.ReadFull(client, head); err != nil {
		return
	}
	if binary.BigEndian.Uint32(head[0:4]) == 8 && binary.BigEndian.Uint32(head[4:8]) == 80877103 {
		if _, err := client.Write([]byte{'N'}); err != nil {
			return
		}
	} else if _, err := server.Write(head); err != nil {
		return
	}
	go func() { _, _ = io.Copy(server, client); server.Close() }()
	_, _ = io.Copy(client, server)
}

// TestTLSRequiredByTheDSNButNotServed: PG_DSN asks for TLS (sslmode=require,
// verify-ca, verify-full) of a server that does not offer it (ssl = off,
// stood in for by a proxy in front of the real server that answers the TLS
// request with 'N', as such a server does). pgx reports "server refused TLS
// connection", which was transient (exit 3: retry), and no retry helps. It
// is a configuration error naming sslmode. With sslmode=prefer the same
// server is used without TLS.
func TestTLSRequiredByTheDSNButNotServed(t *testing.T) {
	e := newEnv(t)
	proxied := e.pgThroughProxy(t, testenv.ProxyOptions{Conn: refuseTLS})
	through := func(mode string) Postgres {
		return Postgres{DSN: testenv.WithParams(t, proxied, map[string]string{"sslmode": mode})}
	}
	if _, err := Setup(testCtx(t, time.Minute), through("prefer")); err != nil {
		t.Fatalf("setup with sslmode=prefer through the proxy: %v", err)
	}
	for _, mode := range []string{"require", "verify-ca", "verify-full"} {
		_, err := Setup(testCtx(t, time.Minute), through(mode))
		t.Logf("sslmode=%s against a server without TLS", mode)
		testenv.CheckHinted(t, err, Hint, outcome.Config, ErrPGNoTLS, "sslmode", "does not offer TLS")
	}
}
