package kafkastate

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/changesink/changesink/internal/kafkatest"
	"github.com/changesink/changesink/internal/kestra"
	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
)

// produceMany writes n records of about 200 bytes of JSON over the topic's
// partitions (kafkatest.ProduceMany), within 5 minutes.
func produceMany(t testing.TB, cl *kgo.Client, topic string, partitions int32, n int) {
	t.Helper()
	if err := kafkatest.ProduceMany(testCtx(t, 5*time.Minute), cl, topic, partitions, n); err != nil {
		t.Fatal(err)
	}
}

// largeBatchEnv is a topic of 60,000 records over six partitions: one
// batch, whose COPY takes long enough to be interrupted.
func largeBatchEnv(t *testing.T) (*env, Config) {
	t.Helper()
	e := newEnv(t)
	createTopic(t, e.adm, e.topic, 6, nil)
	produceMany(t, e.kcl, e.topic, 6, 60000)
	cfg := e.config()
	cfg.PollSeconds = 30
	return e, cfg
}

// startMidCopy starts cmd, a run of e's batch, and returns once its COPY
// runs.
func startMidCopy(t *testing.T, e *env, cmd *exec.Cmd) *testenv.Process {
	t.Helper()
	child := testenv.Start(t, cmd)
	waitForCopy(t, e, 20*time.Second)
	return child
}

// TestSIGKILLMidBatchThenRerun: a materializer process (the test binary
// run as one) is killed with SIGKILL while it copies a large batch into
// PostgreSQL; nothing is committed, and a re-run started at once (its
// backend may still hold the topic lock for a moment: the re-run waits for
// it, LockWait) leaves exactly the tables of an uninterrupted run into
// another database.
func TestSIGKILLMidBatchThenRerun(t *testing.T) {
	e, cfg := largeBatchEnv(t)
	child := startMidCopy(t, e, materializer(context.Background(), t, cfg))
	if killed := child.Kill(t); killed.Signal != syscall.SIGKILL {
		t.Fatalf("the run was not killed mid-batch (exit %d): %s", killed.Code, killed.Output())
	}
	if s := e.snapshot(t); s != "--\n--\n" {
		t.Fatalf("a killed run committed something:\n%.500s", s)
	}

	// Re-run at once, to the end (60,000 records fit in one batch).
	if r, err := testenv.Run(materializer(context.Background(), t, cfg)); err != nil || r.Code != 0 {
		t.Fatalf("re-run: exit %d, %v\n%s", r.Code, err, r.Output())
	}
	// An uninterrupted run into another database.
	other := *e
	other.pg = Postgres{DSN: testenv.CreateDatabase(t, e.adminPG, testenv.UniqueName(t, "ks_"), "")}
	if _, err := Setup(testCtx(t, time.Minute), other.pg); err != nil {
		t.Fatal(err)
	}
	ocfg := cfg
	ocfg.Postgres = other.pg
	if _, err := other.run(t, ocfg, hooks{}); err != nil {
		t.Fatal(err)
	}
	if a, b := e.snapshot(t), other.snapshot(t); a != b {
		t.Errorf("after SIGKILL and a re-run the tables differ from an uninterrupted run (%d vs %d bytes)", len(a), len(b))
	}
	if n := len(e.records(t)); n != 30001 {
		t.Errorf("stored %d keys, want 30001", n)
	}
}

// waitForCopy waits until a session of e's database runs the batch's COPY.
func waitForCopy(t testing.TB, e *env, timeout time.Duration) {
	t.Helper()
	waitForSessions(t, e, timeout, 2*time.Millisecond, "the COPY", func(n int) bool { return n > 0 },
		`state = 'active' AND query ILIKE 'copy%`+stagingTable+`%'`)
}

// waitForNoSession waits until no changesink session is left in e's
// database.
func waitForNoSession(t testing.TB, e *env, timeout time.Duration) {
	t.Helper()
	waitForSessions(t, e, timeout, 20*time.Millisecond, "the killed run's session to end", func(n int) bool { return n == 0 },
		`application_name = $1`, applicationName)
}

// waitForSessions counts the sessions of e's database that match where (a
// condition on pg_stat_activity, with args) every poll until done accepts
// the count; waiting names what it waits for when the query fails.
func waitForSessions(t testing.TB, e *env, timeout, poll time.Duration, waiting string, done func(n int) bool, where string, args ...any) {
	t.Helper()
	ctx := testCtx(t, timeout)
	conn := e.conn(t)
	for {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND `+where, args...).Scan(&n)
		if err != nil {
			t.Fatalf("waiting for %s: %v", waiting, err)
		}
		if done(n) {
			return
		}
		time.Sleep(poll)
	}
}

// TestPGBackendTerminatedMidBatch: pg_terminate_backend on the
// materializer's session during the COPY, after the fetch (the next
// statements: ANALYZE, the merge) and before the end-of-batch topic check
// (the next: the positions upsert): a transient error, nothing committed,
// and a re-run converges. The error said only "postgresql: release the
// merge's savepoint: FATAL: terminating connection due to administrator
// command (SQLSTATE 57P01)", not what every other transient kafka-state
// error says: nothing was committed (and its hint: a re-run resumes). It
// says it once.
func TestPGBackendTerminatedMidBatch(t *testing.T) {
	const hint = "the next batch resumes from the saved positions"
	e := newEnv(t)
	createTopic(t, e.adm, e.topic, 3, nil)
	produceMany(t, e.kcl, e.topic, 3, 20000)
	for _, c := range []struct {
		name string
		// at returns the hooks that call terminate.
		at func(terminate func()) hooks
	}{
		{"during the COPY", func(terminate func()) hooks { return hooks{duringCopy: func(context.Context) { terminate() }} }},
		{"after the fetch", func(terminate func()) hooks { return hooks{afterFetch: terminate} }},
		{"before the topic re-check", func(terminate func()) hooks {
			return hooks{beforeRecheck: func(context.Context) error { terminate(); return nil }}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := e.snapshot(t)
			killed := false
			_, err := e.run(t, e.config(), c.at(func() {
				var n int
				err := e.conn(t).QueryRow(testCtx(t, time.Minute), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
					WHERE datname = current_database() AND application_name = $1`, applicationName).Scan(&n)
				killed = err == nil && n == 1
				if !killed {
					t.Errorf("pg_terminate_backend: %d backends, %v", n, err)
				}
				waitForNoSession(t, e, 10*time.Second)
			}))
			if !killed {
				t.Fatalf("the hook did not terminate exactly one backend; run: %v", err)
			}
			testenv.CheckHinted(t, err, Hint, outcome.Transient, ErrNothingCommitted, fmt.Sprintf("topic %q: postgresql: ", e.topic), "; nothing was committed", hint)
			if err != nil && strings.Count(err.Error(), "nothing was committed") != 1 {
				t.Errorf("the error says %q more than once: %v", "nothing was committed", err)
			}
			t.Logf("error: %v", err)
			if after := e.snapshot(t); after != before {
				t.Fatal("a run whose backend was terminated committed something")
			}
		})
	}
	res := e.mustRun(t)
	if res.Consumed != 20000 || len(e.records(t)) != 10001 {
		t.Errorf("re-run: consumed %d, %d keys; want 20000 and 10001", res.Consumed, len(e.records(t)))
	}
}

// TestBrokerStoppedMidBatch: the broker becomes unreachable in the middle of
// a fetch, through a proxy in front of it that stops
// after 256 KiB of responses, either closing every connection (a broker
// that exits) or keeping them open and silent (a hung broker or a network
// black hole): the run fails with a clear transient error within
// POLL_SECONDS plus a bounded timeout, and nothing is committed.
func TestBrokerStoppedMidBatch(t *testing.T) {
	e := newTopicEnv(t, 3)
	produceMany(t, e.kcl, e.topic, 3, 30000)
	for _, stall := range []bool{false, true} {
		t.Run(map[bool]string{false: "connections closed", true: "connections hang"}[stall], func(t *testing.T) {
			p := startProxy(t, e.brokers, proxyOpts{cutAfter: 256 << 10, stall: stall})
			defer p.Close()
			cfg := e.config()
			cfg.PollSeconds = 5
			cfg.KafkaProperties = fmt.Sprintf(`{"bootstrap.servers":%q}`, p.Addr())
			_, err := e.run(t, cfg, hooks{})
			end := time.Now()
			cut := p.cutAt.Load()
			if cut == 0 {
				t.Fatalf("the proxy never cut the connection (run: %v)", err)
			}
			if err == nil {
				t.Fatal("the run succeeded although the broker stopped mid-batch")
			}
			testenv.CheckHinted(t, err, Hint, outcome.Transient, nil, e.topic, "kafka fetch")
			bound := time.Duration(cfg.PollSeconds)*time.Second + kafkaTimeout + 5*time.Second
			if d := end.Sub(time.Unix(0, cut)); d > bound {
				t.Errorf("the error came %s after the outage, want within %s", d, bound)
			}
			t.Logf("error %s after the outage: %v", end.Sub(time.Unix(0, cut)).Round(time.Millisecond), err)
			if s := e.snapshot(t); s != "--\n--\n" {
				t.Fatal("a run whose broker stopped committed something")
			}
		})
	}
}

// TestTwoMaterializersAtOnce: while one materializer holds the topic (it is
// paused before its end-of-batch check), a second one, a process of its own
// (materializer), waits LockWait, then exits 3 (transient) with the lock
// message naming the first one's backend and changes nothing; the first
// then commits. The
// message says what the README's runbook says: a task retry: repeats every
// failure (Kestra's retry has no condition on error_class; it said "a Kestra
// retry on error_class transient does it").
func TestTwoMaterializersAtOnce(t *testing.T) {
	e := newEnv(t)
	createTopic(t, e.adm, e.topic, 2, nil)
	produce(t, e.kcl, e.topic, kv(0, "a", `1`), kv(1, "b", `2`))
	var (
		wg       sync.WaitGroup
		second   testenv.Result
		exitCode = -1
	)
	res, err := e.run(t, e.config(), hooks{beforeRecheck: func(ctx context.Context) error {
		wg.Add(1)
		defer wg.Done()
		var err error
		if second, err = testenv.Run(materializer(ctx, t, e.config())); err == nil {
			exitCode = second.Code
		}
		return nil
	}})
	wg.Wait()
	if err != nil {
		t.Fatalf("the first materializer failed: %v", err)
	}
	out := second.Output()
	if exitCode != 3 || !strings.Contains(out, "another materializer holds this topic lock") ||
		!strings.Contains(out, `application \"changesink kafka-state\"`) ||
		!strings.Contains(out, `"error_class":"transient"`) {
		t.Fatalf("second materializer: exit %d, output:\n%s\nwant exit 3 with the lock message naming the holder", exitCode, out)
	}
	for _, says := range []string{"nothing was changed", `"hint":"` + Hint(ErrLocked)[:40]} {
		if !strings.Contains(out, says) {
			t.Errorf("second materializer's lock failure does not say %q:\n%s", says, out)
		}
	}
	if res.Consumed != 2 || len(e.records(t)) != 2 {
		t.Errorf("first materializer: %+v", res)
	}
}

// TestRunbookLockSQL: the runbook's row (docs/runbook.md) for the topic lock gave the
// key only as kestra-kafka-state:<topic>, and a user took
// pg_advisory_lock(hashtext('kestra-kafka-state:…')), another key than the
// batches' hashtextextended(…, 0). The row's SQL, run as written (<topic>
// replaced), takes the lock every batch takes (sqlLock, from another
// session, then fails), and finds its holder; the lock goes with the
// transaction.
func TestRunbookLockSQL(t *testing.T) {
	raw := testenv.ReadFile(t, filepath.Join("..", "..", "docs", "runbook.md"))
	_, row, _ := strings.Cut(string(raw), "### `"+ErrLocked.Error()+"`")
	row, _, _ = strings.Cut(row, "\n### ")
	var take, find string
	for i, span := range strings.Split(row, "`") {
		switch {
		case i%2 == 0: // outside the code spans
		case strings.Contains(span, "pg_advisory_xact_lock(hashtextextended("):
			take = span
		case strings.Contains(span, "FROM pg_locks"):
			find = span
		}
	}
	if take == "" || find == "" {
		t.Fatalf("the runbook row for %q gives no SQL to take the lock (%q) or to find its holder (%q):\n%s", ErrLocked, take, find, row)
	}
	e := newTopicEnv(t, 1)
	ctx := testCtx(t, time.Minute)
	forTopic := func(sql string) string { return strings.ReplaceAll(sql, "<topic>", e.topic) }
	holder, other := e.conn(t), e.conn(t)
	var pid int32
	if err := holder.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	tryLock := func() bool {
		t.Helper()
		tx, err := other.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		var locked bool
		if err := tx.QueryRow(ctx, sqlLock, TopicLockKey(e.topic)).Scan(&locked); err != nil {
			t.Fatal(err)
		}
		return locked
	}
	// The user's guess is another lock.
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_lock(hashtext($1))`, TopicLockKey(e.topic)); err != nil {
		t.Fatal(err)
	}
	if !tryLock() {
		t.Error("pg_advisory_lock(hashtext(key)) kept a batch out: the README calls it another key")
	}
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_unlock_all()`); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, forTopic(take)); err != nil {
		t.Fatalf("the runbook's %q: %v", take, err)
	}
	if tryLock() {
		t.Errorf("a batch's lock (%s) was free while the runbook's %q held", sqlLock, take)
	}
	rows, err := other.Query(ctx, forTopic(find))
	if err != nil {
		t.Fatalf("the runbook's %q: %v", find, err)
	}
	var pids []int32
	for rows.Next() {
		if vals, err := rows.Values(); err != nil {
			t.Fatal(err)
		} else if p, ok := vals[0].(int32); ok {
			pids = append(pids, p)
		}
	}
	if rows.Close(); rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	if len(pids) != 1 || pids[0] != pid {
		t.Errorf("the runbook's holder query found pids %v, want the holder's %d", pids, pid)
	}
	if _, err := holder.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	if !tryLock() {
		t.Error("the lock was still held after the runbook's COMMIT")
	}
}

// TestSCRAM: SASL/SCRAM-SHA-256 and -512 against the broker's SCRAM
// listener work; a wrong password is a configuration error that does not
// show the password.
func TestSCRAM(t *testing.T) {
	vars := testenv.Lookup(t, "CHANGESINK_TEST_KAFKA_SCRAM", "CHANGESINK_TEST_KAFKA_SCRAM_USER", "CHANGESINK_TEST_KAFKA_SCRAM_PASSWORD")
	e := newTopicEnv(t, 2)
	produce(t, e.kcl, e.topic, kv(0, "a", `1`), kv(1, "b", `2`))
	props := func(mech, password string) string {
		return fmt.Sprintf(`{"bootstrap.servers":%q,"security.protocol":"SASL_PLAINTEXT","sasl.mechanisms":%q,"sasl.username":%q,"sasl.password":%q,"client.id":"changesink-test"}`,
			vars["CHANGESINK_TEST_KAFKA_SCRAM"], mech, vars["CHANGESINK_TEST_KAFKA_SCRAM_USER"], password)
	}
	for i, mech := range []string{"SCRAM-SHA-256", "SCRAM-SHA-512"} {
		t.Run(mech, func(t *testing.T) {
			produce(t, e.kcl, e.topic, kv(0, "c", fmt.Sprint(i)))
			cfg := e.config()
			cfg.KafkaProperties = props(mech, vars["CHANGESINK_TEST_KAFKA_SCRAM_PASSWORD"])
			res, err := e.run(t, cfg, hooks{})
			if err != nil {
				t.Fatalf("materialize over %s: %v", mech, err)
			}
			if res.Consumed == 0 {
				t.Errorf("consumed nothing over %s", mech)
			}
		})
	}
	t.Run("wrong password", func(t *testing.T) {
		const wrong = "not-the-Password-42"
		cfg := e.config()
		cfg.KafkaProperties = props("SCRAM-SHA-256", wrong)
		before := e.snapshot(t)
		_, err := e.run(t, cfg, hooks{})
		testenv.WantHinted(t, err, Hint, outcome.Config, ErrKafkaSASL)
		if strings.Contains(err.Error(), wrong) || strings.Contains(err.Error(), vars["CHANGESINK_TEST_KAFKA_SCRAM_PASSWORD"]) {
			t.Errorf("error shows a password: %v", err)
		}
		if e.snapshot(t) != before {
			t.Error("tables changed")
		}
	})
}

// TestStopDuringCommit: Kestra's task timeout sends SIGTERM, which
// cancels the run's context. Arriving while COMMIT was in flight, it made
// the run report "postgresql: commit: context canceled" (transient: "nothing
// was committed") while PostgreSQL had committed the batch. A run that
// reports a failure must have committed nothing, and one that committed
// must report it: once COMMIT is sent, the run waits for its answer.
func TestStopDuringCommit(t *testing.T) {
	e := newTopicEnv(t, 1)
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
	res, err := Materialize(ctx, e.config(), Env{Dir: kestra.Dir{Path: dir}, hooks: h})
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

// TestStopBeforeCommit: a stop that arrives before COMMIT is sent
// ends the run with nothing committed.
func TestStopBeforeCommit(t *testing.T) {
	e := newTopicEnv(t, 1)
	produce(t, e.kcl, e.topic, kv(0, "a", `{"v":1}`))
	ctx, cancel := context.WithCancel(testCtx(t, time.Minute))
	defer cancel()
	_, err := Materialize(ctx, e.config(), Env{Dir: kestra.Dir{Path: t.TempDir()}, hooks: hooks{beforeCommit: cancel}})
	testenv.WantHinted(t, err, Hint, outcome.Transient, ErrStopped)
	if next, _, _ := e.positions(t); next != nil || len(e.records(t)) != 0 {
		t.Fatalf("a run stopped before COMMIT committed: positions %v", next)
	}
}

// TestStopSaysWhatWasLeft: a stop (SIGTERM, Kestra's task timeout) at
// other moments than right before the commit. The run ended transient with
// the step's bare error, "postgresql: read kafka_state.positions: context
// canceled", or "kafka metadata ...: context canceled (the broker was
// unreachable or dropped the connection ...)": not saying that it was
// stopped, and blaming a broker that answered. It must say it was stopped,
// that nothing was committed, and that a re-run converges.
//
// A stop during the COPY whose COPY fails otherwise than with the context's
// error (pgx closes the connection under it: "use of closed network
// connection"; here the backend is gone first) lost the message: every
// failure once the run is stopped says it.
func TestStopSaysWhatWasLeft(t *testing.T) {
	for _, c := range []struct {
		name string
		// stop returns the hooks that stop the run with cancel.
		stop func(t *testing.T, e *env, cancel context.CancelFunc) hooks
		// canceled: the error wraps context.Canceled (the step's own
		// error is the stop's).
		canceled bool
	}{
		{"before the start", func(_ *testing.T, _ *env, cancel context.CancelFunc) hooks { cancel(); return hooks{} }, true},
		{"after the fetch", func(_ *testing.T, _ *env, cancel context.CancelFunc) hooks { return hooks{afterFetch: cancel} }, true},
		{"before the topic re-check", func(_ *testing.T, _ *env, cancel context.CancelFunc) hooks {
			return hooks{beforeRecheck: func(context.Context) error { cancel(); return nil }}
		}, true},
		{"during the COPY, its connection lost", func(t *testing.T, e *env, cancel context.CancelFunc) hooks {
			return hooks{duringCopy: func(ctx context.Context) {
				var n int
				if err := e.conn(t).QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
					WHERE datname = current_database() AND application_name = $1`, applicationName).Scan(&n); err != nil || n != 1 {
					t.Errorf("pg_terminate_backend: %d backends, %v", n, err)
				}
				waitForNoSession(t, e, 10*time.Second)
				cancel()
			}}
		}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newTopicEnv(t, 1)
			produce(t, e.kcl, e.topic, kv(0, "a", `{"v":1}`), kv(0, "b", `{"v":2}`))
			ctx, cancel := context.WithCancel(testCtx(t, time.Minute))
			defer cancel()
			h := c.stop(t, e, cancel)
			_, err := Materialize(ctx, e.config(), Env{Dir: kestra.Dir{Path: t.TempDir()}, hooks: h})
			var is error
			if c.canceled {
				is = context.Canceled
			}
			testenv.CheckHinted(t, err, Hint, outcome.Transient, is, "kafka-state materialize was stopped before its commit (a stop signal, SIGTERM or SIGINT, "+
				"or the task's timeout): nothing was committed: ", "hint: Re-run: nothing was committed, and the next batch resumes from the saved positions.")
			t.Logf("error: %v", err)
			if err != nil && strings.Contains(err.Error()+Hint(err), "unreachable") {
				t.Errorf("a stop is blamed on the broker: %v", err)
			}
			if next, _, _ := e.positions(t); next != nil || len(e.records(t)) != 0 {
				t.Fatalf("a stopped run committed: positions %v", next)
			}
		})
	}
}

// TestIdleInTransactionTimeout: the server ends a session idle in its
// transaction longer than idle_in_transaction_session_timeout; a batch is
// idle in its transaction while it asks Kafka (the offsets, the end-of-batch
// topic check: up to 15 s against a slow broker; the hook stands for that).
// PostgreSQL's FATAL 25P03 was an internal error (exit 4, "please report
// it"); the session is gone and nothing was committed, so it is transient
// (exit 3), and the re-run converges.
func TestIdleInTransactionTimeout(t *testing.T) {
	e := newTopicEnv(t, 1)
	produce(t, e.kcl, e.topic, kv(0, "a", `{"v":1}`), kv(0, "b", `{"v":2}`))
	e.setDatabase(t, `idle_in_transaction_session_timeout = '200ms'`)
	before := e.snapshot(t)
	_, err := e.run(t, e.config(), hooks{beforeRecheck: func(context.Context) error {
		time.Sleep(time.Second) // idle in the transaction, as during a slow Kafka request
		return nil
	}})
	testenv.WantHinted(t, err, Hint, outcome.Transient, ErrPGIdleTimeout)
	e.committedNothingThenConverges(t, before, 2)
}

// TestPositionsRowLockedByAnotherSession: a hand edit of
// kafka_state.positions left in an open transaction holds the row lock the
// batch's SELECT ... FOR UPDATE waits for; with a lock_timeout on the
// database (or role) PostgreSQL cancels the wait with 55P03
// lock_not_available, which was an internal error (exit 4, "report it"). The
// lock belongs to another session and goes with it: transient (exit 3),
// saying where to look, nothing changed, and the run after the other
// session ends commits.
func TestPositionsRowLockedByAnotherSession(t *testing.T) {
	e := newTopicEnv(t, 1)
	produce(t, e.kcl, e.topic, kv(0, "a", `1`))
	e.mustRun(t)
	produce(t, e.kcl, e.topic, kv(0, "b", `2`))
	e.setDatabase(t, `lock_timeout = '500ms'`)
	before := e.snapshot(t)
	ctx := testCtx(t, time.Minute)
	tx, err := e.conn(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE kafka_state.positions SET updated_at = updated_at WHERE topic = $1`, e.topic); err != nil {
		t.Fatal(err)
	}
	_, err = e.run(t, e.config(), hooks{})
	testenv.CheckHinted(t, err, Hint, outcome.Transient, ErrPGLockTimeout, "read kafka_state.positions", "lock timeout", "pg_locks")
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	e.committedNothingThenConverges(t, before, 1)
}

// TestReportLostAfterTheCommit: the working directory gone while the
// batch commits, so batch-report.json cannot be published after the
// COMMIT, was an internal error (exit 4, documented as "nothing was
// committed"). It is transient, says the batch is committed, and the re-run
// commits nothing twice.
func TestReportLostAfterTheCommit(t *testing.T) {
	e := newTopicEnv(t, 1)
	produce(t, e.kcl, e.topic, kv(0, "a", `1`), kv(0, "b", `2`))
	dir := t.TempDir()
	ctx := testCtx(t, time.Minute)
	_, err := Materialize(ctx, e.config(), Env{Dir: kestra.Dir{Path: dir}, hooks: hooks{beforeCommit: func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Error(err)
		}
	}}})
	testenv.WantHinted(t, err, Hint, outcome.Transient, ErrReportNotPublished, "the batch is committed (its records and positions are in PostgreSQL), but batch-report.json could not be published in WORKING_DIR",
		"a re-run converges (it commits nothing twice")
	if got := len(e.records(t)); got != 2 {
		t.Errorf("%d records stored, want the batch's 2", got)
	}
	if res := e.mustRun(t); res.Consumed != 0 {
		t.Errorf("re-run consumed %d, want 0", res.Consumed)
	}
}
