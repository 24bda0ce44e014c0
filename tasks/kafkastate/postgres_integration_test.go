package kafkastate

// PostgreSQL targets that are configuration errors (exit 2, saying what to
// fix), not internal ones: a database where setup never ran, a role without
// the privileges, a read-only server or database. pg_test.go holds the
// SQLSTATE decisions behind them without a server.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
)

// TestNoSchemaOrNoPrivileges: materialize and verify against a
// database where setup never ran (a PG_DSN naming the wrong database), or
// as a role without privileges on schema kafka_state, failed with
// PostgreSQL's error as an internal error (exit 4, "please report it").
// Both are configuration errors (exit 2) that say what to do.
func TestNoSchemaOrNoPrivileges(t *testing.T) {
	e := newEnv(t)
	createTopic(t, e.adm, e.topic, 1, nil)
	produce(t, e.kcl, e.topic, kv(0, "a", `{"v":1}`))
	check := func(name string, err error, want string) {
		t.Helper()
		if err == nil || outcome.Classify(err) != outcome.Config || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v (class %v), want a configuration error saying %q", name, err, outcome.Classify(err), want)
		}
	}

	bare := Postgres{DSN: testenv.CreateDatabase(t, e.adminPG, testenv.UniqueName(t, "ks_"), "")}
	cfg := e.config()
	cfg.Postgres = bare
	_, err := e.run(t, cfg, hooks{})
	check("materialize without setup", err, "kafka-state setup")
	_, err = Verify(testCtx(t, time.Minute), bare, e.topic)
	check("verify without setup", err, "kafka-state setup")

	role := testenv.UniqueName(t, "ks_")
	testenv.CreateRole(t, e.adminPG, role, "breaker-pw")
	cc, err := pgx.ParseConfig(e.pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	unprivileged := Postgres{DSN: fmt.Sprintf("host=%s port=%d dbname=%s sslmode=disable", cc.Host, cc.Port, cc.Database), User: role, Password: "breaker-pw"}
	cfg.Postgres = unprivileged
	_, err = e.run(t, cfg, hooks{})
	check("materialize without privileges", err, "privileges")
	_, err = Verify(testCtx(t, time.Minute), unprivileged, e.topic)
	check("verify without privileges", err, "privileges")
}

// TestReadOnlyDatabase: a PG_DSN pointing at a read-only server (a
// standby) or database failed setup and materialize as internal errors
// (exit 4). Both are configuration errors saying so.
func TestReadOnlyDatabase(t *testing.T) {
	e := newEnv(t)
	createTopic(t, e.adm, e.topic, 1, nil)
	produce(t, e.kcl, e.topic, kv(0, "a", `{"v":1}`))
	cc, err := pgx.ParseConfig(e.pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	e.exec(t, `ALTER DATABASE `+pgx.Identifier{cc.Database}.Sanitize()+` SET default_transaction_read_only = on`)
	_, err = Setup(testCtx(t, time.Minute), e.pg)
	if err == nil || outcome.Classify(err) != outcome.Config || !strings.Contains(err.Error(), "read-only") {
		t.Errorf("setup: err = %v (class %v), want a configuration error saying read-only", err, outcome.Classify(err))
	}
	_, err = e.run(t, e.config(), hooks{})
	if err == nil || outcome.Classify(err) != outcome.Config || !strings.Contains(err.Error(), "read-only") {
		t.Errorf("materialize: err = %v (class %v), want a configuration error saying read-only", err, outcome.Classify(err))
	}
}
