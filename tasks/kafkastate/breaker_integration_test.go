package kafkastate

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/changesink/changesink/internal/kestra"
	"github.com/changesink/changesink/internal/outcome"
)

// TestBreakerVerifyMalformedPositions: verify over a positions row whose
// next offset is not an integer failed with PostgreSQL's cast error as an
// internal error (exit 4) naming no topic; materialize refuses the same row
// with ErrBadPositions. verify must refuse it the same way.
func TestBreakerVerifyMalformedPositions(t *testing.T) {
	e := newEnv(t)
	createTopic(t, e.adm, e.topic, 1, nil)
	produce(t, e.kcl, e.topic, kv(0, "a", `{"v":1}`))
	e.mustRun(t)
	for _, bad := range []string{`{"0": "abc"}`, `{"0": 1e30}`, `{"0": 1.5}`} {
		e.exec(t, `UPDATE kafka_state.positions SET next_offsets = $1::jsonb WHERE topic = $2`, bad, e.topic)
		_, err := Verify(testCtx(t, time.Minute), e.pg, e.topic)
		assertRefused(t, err, ErrBadPositions, e.topic, "kafka_state.positions")
	}
}

// TestBreakerStopDuringCommit: Kestra's task timeout sends SIGTERM, which
// cancels the run's context. Arriving while COMMIT was in flight, it made
// the run report "postgresql: commit: context canceled" (transient: "nothing
// was committed") while PostgreSQL had committed the batch. A run that
// reports a failure must have committed nothing, and one that committed
// must report it: once COMMIT is sent, the run waits for its answer.
func TestBreakerStopDuringCommit(t *testing.T) {
	e := newEnv(t)
	createTopic(t, e.adm, e.topic, 1, nil)
	produce(t, e.kcl, e.topic, kv(0, "a", `{"v":1}`), kv(0, "b", `{"v":2}`))
	// A deferred constraint trigger makes COMMIT take a second, and lets
	// a cancel request only cut it short, as when the COMMIT finishes on
	// the server before pgx's cancel request (sent when the context ends)
	// arrives.
	e.exec(t, `CREATE FUNCTION kafka_state.breaker_slow() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			BEGIN PERFORM pg_sleep(1); EXCEPTION WHEN query_canceled THEN NULL; END;
			RETURN NULL;
		END$$`)
	e.exec(t, `CREATE CONSTRAINT TRIGGER breaker_slow AFTER INSERT OR UPDATE ON kafka_state.positions
		DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION kafka_state.breaker_slow()`)
	ctx, cancel := context.WithCancel(testCtx(t, time.Minute))
	defer cancel()
	h := hooks{beforeCommit: func() { time.AfterFunc(300*time.Millisecond, cancel) }}
	dir := t.TempDir()
	res, err := materialize(ctx, e.config(), kestra.Dir{Path: dir}, nil, h)
	waitForNoSession(t, e, 10*time.Second) // the server may still be committing
	next, _, _ := e.positions(t)
	committed := next != nil
	switch {
	case err != nil && committed:
		t.Fatalf("the run failed (%v, class %v) but PostgreSQL committed the batch: positions %v, %d records",
			err, outcome.Classify(err), next, len(e.records(t)))
	case err == nil && !committed:
		t.Fatalf("the run succeeded (%+v) but nothing was committed", res)
	case err != nil:
		t.Fatalf("the stop came after COMMIT was sent; the run must wait for it and succeed, got %v", err)
	}
	if res.Consumed != 2 || next["0"] != 2 {
		t.Fatalf("result %+v, positions %v; want 2 records, next offset 2", res, next)
	}
	if _, err := os.Stat(filepath.Join(dir, ReportFile)); err != nil {
		t.Fatalf("committed batch without %s: %v", ReportFile, err)
	}
}

// TestBreakerStopBeforeCommit: a stop that arrives before COMMIT is sent
// ends the run with nothing committed.
func TestBreakerStopBeforeCommit(t *testing.T) {
	e := newEnv(t)
	createTopic(t, e.adm, e.topic, 1, nil)
	produce(t, e.kcl, e.topic, kv(0, "a", `{"v":1}`))
	ctx, cancel := context.WithCancel(testCtx(t, time.Minute))
	defer cancel()
	_, err := materialize(ctx, e.config(), kestra.Dir{Path: t.TempDir()}, nil, hooks{beforeCommit: cancel})
	if err == nil || outcome.Classify(err) != outcome.Transient {
		t.Fatalf("err = %v (class %v), want a transient error", err, outcome.Classify(err))
	}
	if next, _, _ := e.positions(t); next != nil || len(e.records(t)) != 0 {
		t.Fatalf("a run stopped before COMMIT committed: positions %v", next)
	}
}

// TestBreakerUnwritableWorkingDir: with a working directory the report
// cannot be written into, the run committed the batch and then failed as
// transient ("nothing was committed", exit 3), losing the batch's outputs.
// It must find out before it changes anything: a configuration error
// naming WORKING_DIR, and nothing committed.
func TestBreakerUnwritableWorkingDir(t *testing.T) {
	e := newEnv(t)
	createTopic(t, e.adm, e.topic, 1, nil)
	produce(t, e.kcl, e.topic, kv(0, "a", `{"v":1}`))
	before := e.snapshot(t)
	missing := filepath.Join(t.TempDir(), "gone")
	_, err := materialize(testCtx(t, time.Minute), e.config(), kestra.Dir{Path: missing}, nil, hooks{})
	if err == nil || outcome.Classify(err) != outcome.Config || !strings.Contains(err.Error(), "WORKING_DIR") {
		t.Fatalf("err = %v (class %v), want a configuration error naming WORKING_DIR", err, outcome.Classify(err))
	}
	if after := e.snapshot(t); after != before {
		t.Fatalf("the run changed the tables:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// TestBreakerKeyTooLongForIndex: a key whose index entry exceeds what a
// PostgreSQL btree holds (kafka_state.records' primary key: about 2700
// bytes after compression) failed the merge as an internal error (exit 4)
// naming neither the record nor what to do. It must be a refusal naming
// the topic, partition, offset and key, with nothing committed. A long but
// compressible key (which PostgreSQL stores) still goes through.
func TestBreakerKeyTooLongForIndex(t *testing.T) {
	e := newEnv(t)
	createTopic(t, e.adm, e.topic, 2, nil)
	raw := make([]byte, 7500)
	if _, err := rand.Read(raw); err != nil {
		t.Fatal(err)
	}
	long := base64.StdEncoding.EncodeToString(raw) // 10,000 bytes that do not compress
	produce(t, e.kcl, e.topic, kv(0, strings.Repeat("k", 10000), `{"v":0}`), kv(1, "a", `{"v":1}`))
	e.mustRun(t)
	before := e.snapshot(t)
	produce(t, e.kcl, e.topic, kv(1, "b", `{"v":2}`), kv(1, long, `{"v":3}`))
	for _, h := range []hooks{{}, {onConflict: true}} {
		_, err := e.run(t, e.config(), h)
		assertRefused(t, err, ErrKeyTooLong, e.topic, "partition 1 offset 2", long[:50], "10000 bytes")
		if after := e.snapshot(t); after != before {
			t.Fatalf("a refused run changed the tables")
		}
	}
}

// TestBreakerNoSchemaOrNoPrivileges: materialize and verify against a
// database where setup never ran (a PG_DSN naming the wrong database), or
// as a role without privileges on schema kafka_state, failed with
// PostgreSQL's error as an internal error (exit 4, "please report it").
// Both are configuration errors (exit 2) that say what to do.
func TestBreakerNoSchemaOrNoPrivileges(t *testing.T) {
	e := newEnv(t)
	createTopic(t, e.adm, e.topic, 1, nil)
	produce(t, e.kcl, e.topic, kv(0, "a", `{"v":1}`))
	check := func(name string, err error, want string) {
		t.Helper()
		if err == nil || outcome.Classify(err) != outcome.Config || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v (class %v), want a configuration error saying %q", name, err, outcome.Classify(err), want)
		}
	}

	bare := Postgres{DSN: createDatabase(t, e.adminPG, uniqueName(t))}
	cfg := e.config()
	cfg.Postgres = bare
	_, err := e.run(t, cfg, hooks{})
	check("materialize without setup", err, "kafka-state setup")
	_, err = Verify(testCtx(t, time.Minute), bare, e.topic)
	check("verify without setup", err, "kafka-state setup")

	role := uniqueName(t)
	e.exec(t, `CREATE ROLE `+pgx.Identifier{role}.Sanitize()+` LOGIN PASSWORD 'breaker-pw'`)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if conn, err := pgx.Connect(ctx, e.adminPG); err == nil {
			defer conn.Close(ctx)
			_, _ = conn.Exec(ctx, `DROP ROLE IF EXISTS `+pgx.Identifier{role}.Sanitize())
		}
	})
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

// TestBreakerReadOnlyDatabase: a PG_DSN pointing at a read-only server (a
// standby) or database failed setup and materialize as internal errors
// (exit 4). Both are configuration errors saying so.
func TestBreakerReadOnlyDatabase(t *testing.T) {
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
