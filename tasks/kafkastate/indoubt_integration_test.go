package kafkastate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/changesink/changesink/internal/kestra"
	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
)

// TestConnectionLostDuringCommit: the PostgreSQL connection is lost while
// COMMIT is in flight (a proxy in front of the server drops it). The run
// used to say only "postgresql: commit: conn closed", transient, whose
// documented meaning is "nothing was committed". Now it asks PostgreSQL on a
// new connection (txid_status) and reports what happened:
//   - the COMMIT reached the server and only its answer was lost: the batch
//     is committed, and the run succeeds, saying so at WARN;
//   - the connection was lost before the COMMIT reached the server: the
//     transaction aborted, a transient failure that committed nothing; and
//     so when the server side stays open (a network that dropped the
//     connection without telling the backend): the run ends the batch's
//     backend, idle in its transaction, and reads "aborted";
//   - the server cannot be reached again: the outcome is unknown, and the
//     message says the batch may have been committed.
//
// In every case the run after it converges.
func TestConnectionLostDuringCommit(t *testing.T) {
	commitQuery := []byte("Q\x00\x00\x00\x0bcommit\x00") // pgx's simple-query COMMIT
	for _, tc := range []struct {
		name string
		// forward: the COMMIT reaches the server; reconnect: later
		// connections go through; orphan: a COMMIT not forwarded leaves the
		// server's side of the connection open.
		forward, reconnect, orphan bool
		committed                  bool
		says                       []string
	}{
		{name: "answer lost", forward: true, reconnect: true, committed: true},
		{name: "commit lost", forward: false, reconnect: true,
			says: []string{"commit", "PostgreSQL says transaction", "aborted (txid_status): nothing was committed", "Re-run"}},
		{name: "commit lost, backend not told", forward: false, reconnect: true, orphan: true,
			says: []string{"commit", "PostgreSQL says transaction", "aborted (txid_status): nothing was committed", "Re-run"}},
		{name: "server unreachable after", forward: true, reconnect: false, committed: true,
			says: []string{"commit", "may have committed", "could not be told", "SELECT pg_terminate_backend(", "Re-run"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTopicEnv(t, 1)
			produce(t, e.kcl, e.topic, kv(0, "a", `1`), kv(0, "b", `2`))
			var dropped atomic.Bool // one connection's COMMIT was dropped
			dsn := e.pgThroughProxy(t, testenv.ProxyOptions{Conn: func(_ *testenv.Proxy, client, server net.Conn) {
				defer client.Close()
				defer server.Close()
				if dropped.Load() && !tc.reconnect {
					return
				}
				var sawCommit atomic.Bool
				go func() {
					buf := make([]byte, 64<<10)
					for {
						n, err := client.Read(buf)
						if bytes.Contains(buf[:n], commitQuery) && dropped.CompareAndSwap(false, true) {
							sawCommit.Store(true)
							if !tc.forward {
								client.Close()
								if !tc.orphan {
									server.Close()
								}
								return
							}
						}
						if _, werr := server.Write(buf[:n]); werr != nil || err != nil {
							return
						}
					}
				}()
				buf := make([]byte, 64<<10)
				for {
					n, err := server.Read(buf)
					if sawCommit.Load() {
						return // the answer to COMMIT never arrives
					}
					if _, werr := client.Write(buf[:n]); werr != nil || err != nil {
						return
					}
				}
			}})
			cfg := e.config()
			cfg.Postgres.DSN = dsn
			var logs bytes.Buffer
			res, err := Materialize(testCtx(t, 3*time.Minute), cfg, Env{Dir: kestra.Dir{Path: t.TempDir()}, Log: slog.New(slog.NewTextHandler(&logs, nil))})
			if !dropped.Load() {
				t.Fatalf("the proxy saw no COMMIT; run: %v", err)
			}
			if tc.says == nil {
				if err != nil || res.Consumed != 2 {
					t.Fatalf("run: %+v, %v; want a success that consumed 2", res, err)
				}
				if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "committed (txid_status) and kafka_state.positions holds this batch's positions, so this batch is in") {
					t.Errorf("no WARN line saying the batch committed:\n%s", logs.String())
				}
			} else {
				testenv.CheckHinted(t, err, Hint, outcome.Transient, nil, append([]string{e.topic}, tc.says...)...)
			}
			waitForNoSession(t, e, 10*time.Second)
			if next, _, _ := e.positions(t); tc.committed != (next["0"] == 2) {
				t.Errorf("after the run: positions %v, want committed=%v", next, tc.committed)
			}
			res = e.mustRun(t)
			if next, _, _ := e.positions(t); next["0"] != 2 || len(e.records(t)) != 2 {
				t.Fatalf("after the re-run (%+v): positions %v, %d records; want next offset 2 and 2 records", res, next, len(e.records(t)))
			}
			if want := map[bool]int64{true: 0, false: 2}[tc.committed]; res.Consumed != want {
				t.Errorf("the re-run consumed %d, want %d", res.Consumed, want)
			}
		})
	}
}

// TestInDoubtStatus: what inDoubt.status reads from the real server for
// each fate of a transaction: committed (and the positions row bears it
// out, or does not), aborted, still in progress on a backend idle in it
// (which it ends, reading aborted; but not a backend whose pid, xid or
// start is another's), an xid from the future (as after a failover to a
// server that never saw it), and no server to ask.
func TestInDoubtStatus(t *testing.T) {
	e := newTopicEnv(t, 1)
	produce(t, e.kcl, e.topic, kv(0, "a", `1`))
	e.mustRun(t)
	next, clusterID, topicID := e.positions(t)
	cc, err := e.config().Postgres.connConfig()
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t, time.Minute)
	type txn struct {
		d    inDoubt // xid, pid and start
		conn *pgx.Conn
	}
	// begin runs a transaction on a connection of its own and ends it with
	// end ("" leaves it open and idle).
	begin := func(end string) txn {
		conn, err := pgx.ConnectConfig(ctx, cc.Copy())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
			t.Fatal(err)
		}
		x := txn{d: inDoubt{topic: e.topic}, conn: conn}
		if err := conn.QueryRow(ctx, sqlTxID).Scan(&x.d.xid, &x.d.pid, &x.d.start); err != nil {
			t.Fatal(err)
		}
		if end != "" {
			if _, err := conn.Exec(ctx, end); err != nil {
				t.Fatal(err)
			}
		}
		return x
	}
	nextJSON := fmt.Sprintf(`{"0": %d}`, next["0"])
	committed := begin("COMMIT").d
	aborted := begin("ROLLBACK").d
	idle := begin("")
	other, another := begin(""), begin("") // idle too, and must stay alive
	// waiting's UPDATE waits for holder's row lock.
	holder, waiting := begin(""), begin("")
	if _, err := holder.conn.Exec(ctx, `CREATE TABLE indoubt_row (id int); INSERT INTO indoubt_row VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.conn.Exec(ctx, `COMMIT; BEGIN; UPDATE indoubt_row SET id = 2`); err != nil {
		t.Fatal(err)
	}
	updated := make(chan error, 1)
	go func() { _, err := waiting.conn.Exec(ctx, `UPDATE indoubt_row SET id = 3`); updated <- err }()
	waitForSessions(t, e, 10*time.Second, 20*time.Millisecond, "the UPDATE to wait for the row lock", func(n int) bool { return n == 1 },
		`pid = $1 AND wait_event_type = 'Lock'`, waiting.d.pid)
	closed, err := Postgres{DSN: testenv.WithHost(t, e.pg.DSN, testenv.ClosedAddr(t))}.connConfig() // nothing listens there
	if err != nil {
		t.Fatal(err)
	}
	with := func(d inDoubt, edit func(*inDoubt)) inDoubt { edit(&d); return d }
	batch := func(d *inDoubt) { d.clusterID, d.topicID, d.next = clusterID, topicID, nextJSON }
	short := func(d *inDoubt) { d.wait = 2 * time.Second }
	for _, tc := range []struct {
		name   string
		d      inDoubt
		cc     *pgx.ConnConfig
		status string
		says   string
	}{
		{"committed", with(committed, batch), cc, "committed", ""},
		// Told at once: a committed transaction's rows are visible to the
		// next statement.
		{"committed, other positions", with(committed, func(d *inDoubt) { batch(d); d.next = `{"0": 999}` }), cc,
			"", "kafka_state.positions does not show this batch's positions"},
		{"committed, no positions row", with(committed, func(d *inDoubt) { batch(d); d.topic += "_other" }), cc,
			"", "kafka_state.positions does not show this batch's positions"},
		{"aborted", aborted, cc, "aborted", ""},
		{"idle in the transaction", idle.d, cc, "aborted", ""},
		// The terminate statement's conditions, each alone: another
		// backend's pid, another start, for a transaction left idle.
		{"idle, but the pid is another's", with(other.d, func(d *inDoubt) { d.pid = another.d.pid; short(d) }), cc, "", "still in progress after 2s"},
		{"idle, but it started at another time", with(other.d, func(d *inDoubt) { d.start = d.start.Add(-time.Microsecond); short(d) }), cc,
			"", "still in progress after 2s"},
		// A backend busy in the transaction is described, and left alone.
		{"busy, waiting for a lock", with(waiting.d, short), cc, "", "still in progress after 2s; the backend is active, wait event Lock/transactionid"},
		{"from the future", with(committed, func(d *inDoubt) { d.xid += 1 << 40 }), cc, "", "in the future"},
		{"no server", committed, closed, "", "a new connection failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := tc.d.status(ctx, tc.cc)
			if status := f.status; status != tc.status || (tc.says == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.says) {
				t.Errorf("status %q, %v; want %q saying %q", status, err, tc.status, tc.says)
			}
		})
	}
	if _, err := holder.conn.Exec(ctx, `ROLLBACK`); err != nil {
		t.Fatal(err)
	}
	if err := <-updated; err != nil {
		t.Errorf("the waiting UPDATE: %v", err)
	}
	// The backends that were not the batch's are alive and still in their transactions.
	for name, x := range map[string]txn{"other": other, "another": another, "waiting": waiting} {
		var xid int64
		if err := x.conn.QueryRow(ctx, `SELECT txid_current()`).Scan(&xid); err != nil || xid != x.d.xid {
			t.Errorf("%s backend: txid_current %d, %v; want it alive in transaction %d", name, xid, err, x.d.xid)
		}
	}
	if err := idle.conn.Ping(ctx); err == nil {
		t.Error("the batch's idle backend is still alive")
	}
}

// TestCommitWaitsForSynchronousStandby: the batch's COMMIT reaches a
// primary whose synchronous standby is down (.ci/postgres-syncrep; the
// batch asks for synchronous_commit=on). The COMMIT is written on the server
// but stays "in progress" (txid_status) for as long as no standby confirms
// it; a closed connection does not end the wait, a cancel request does, and
// the transaction then commits on this server alone. pgx sends such a
// request for every connection it loses or gives up on; the run sends none
// once COMMIT is sent (cancelGate), so the batch is committed only as
// synchronous_commit says.
//   - The connection is lost while the COMMIT waits, or the COMMIT outlasts
//     the run's own bound (pgTimeout, here hooks.commitTimeout): the run says
//     the COMMIT waits for a synchronous standby (transient), naming the
//     backend, not the "idle in transaction" remedy (ending such a backend
//     keeps the commit). A retry meanwhile waits for the topic lock and names
//     the holder's SyncRep wait. Once the wait ends the batch is committed.
//   - Someone cancels the wait (pg_cancel_backend), after the connection is
//     lost or while the run still waits for the answer: the batch is
//     committed here, and the run succeeds with a WARN line saying no
//     standby may have confirmed it (the server's WARNING, when the answer
//     arrives).
//
// Every way, the run after converges.
func TestCommitWaitsForSynchronousStandby(t *testing.T) {
	// pgx's CancelRequest: length 16, request code 80877102.
	cancelRequest := []byte{0, 0, 0, 16, 0x04, 0xd2, 0x16, 0x2e}
	commitQuery := []byte("Q\x00\x00\x00\x0bcommit\x00")
	for _, tc := range []struct {
		name string
		// cut closes the batch's connection once its COMMIT waits; without
		// it the COMMIT outlasts commitTimeout.
		cut, operatorCancels bool
		// operatorTerminates ends the waiting backend (pg_terminate_backend).
		operatorTerminates bool
		// stop stops the run (cancels its context) once its COMMIT waits.
		stop          bool
		commitTimeout time.Duration
		lost          string
	}{
		{name: "connection lost", cut: true, lost: "the connection was lost after COMMIT was sent"},
		{name: "COMMIT unanswered", commitTimeout: 2 * time.Second,
			lost: "COMMIT got no answer within 2s, so the run closed the connection, without a cancel request " +
				"(a COMMIT waiting for a synchronous standby keeps waiting for it)"},
		{name: "stopped while the COMMIT waits", stop: true, commitTimeout: 2 * time.Second,
			lost: "COMMIT got no answer within 2s, so the run closed the connection, without a cancel request " +
				"(a COMMIT waiting for a synchronous standby keeps waiting for it) " +
				"(the run was stopped meanwhile, terminated signal received, and waited for the COMMIT's answer)"},
		{name: "operator cancels the wait", cut: true, operatorCancels: true},
		// The run is still connected: the server's answer is a success,
		// after a WARNING that it committed on this server alone.
		{name: "operator cancels the waiting COMMIT", operatorCancels: true},
		// The server sends a WARNING, then ends the connection: the run
		// asks on a new one and says both in one WARN line.
		{name: "operator terminates the waiting backend", operatorTerminates: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newBareEnvOn(t, "CHANGESINK_TEST_PG_SYNCREP")
			if _, err := Setup(testCtx(t, time.Minute), e.pg); err != nil {
				t.Fatalf("Setup: %v", err)
			}
			createTopic(t, e.adm, e.topic, 1, nil)
			produce(t, e.kcl, e.topic, kv(0, "a", `1`), kv(0, "b", `2`))
			admin := e.conn(t)
			// However the test ends, no backend of its database is left
			// waiting (the database could not be dropped).
			t.Cleanup(func() {
				_, _ = admin.Exec(context.Background(), `SELECT pg_cancel_backend(pid) FROM pg_stat_activity
					WHERE datname = current_database() AND wait_event = 'SyncRep'`)
			})
			syncRep := func(ctx context.Context, conn *pgx.Conn) (pid int32, err error) {
				err = conn.QueryRow(ctx, `SELECT pid FROM pg_stat_activity
					WHERE datname = current_database() AND wait_event_type = 'IPC' AND wait_event = 'SyncRep'`).Scan(&pid)
				return pid, err
			}

			// The proxy carries every connection, counts the cancel
			// requests it sees, and (with cut) closes the batch's
			// connection once its backend waits in SyncRep.
			committing := make(chan struct{})
			var once sync.Once
			var cancels atomic.Int32
			cut := make(chan struct{})
			closeCut := sync.OnceFunc(func() { close(cut) })
			cutDone := make(chan struct{}) // both sides of the batch's connection are closed
			dsn := e.pgThroughProxy(t, testenv.ProxyOptions{Conn: func(_ *testenv.Proxy, client, server net.Conn) {
				defer client.Close()
				defer server.Close()
				go func() { _, _ = io.Copy(client, server); client.Close() }()
				buf := make([]byte, 64<<10)
				for first := true; ; first = false {
					n, err := client.Read(buf)
					if first && bytes.HasPrefix(buf[:n], cancelRequest) {
						cancels.Add(1)
					}
					if _, werr := server.Write(buf[:n]); werr != nil || err != nil {
						return
					}
					if bytes.Contains(buf[:n], commitQuery) {
						once.Do(func() { close(committing) })
						if tc.cut {
							<-cut
							client.Close()
							server.Close()
							close(cutDone)
							return
						}
					}
				}
			}})
			runCtx, stopRun := context.WithCancelCause(testCtx(t, 3*time.Minute))
			defer stopRun(nil)
			watchErr := make(chan error, 1)
			go func() {
				defer closeCut()
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				select {
				case <-committing:
				case <-ctx.Done():
					watchErr <- errors.New("the proxy saw no COMMIT")
					return
				}
				conn, err := pgx.Connect(ctx, e.pg.DSN)
				if err != nil {
					watchErr <- err
					return
				}
				defer conn.Close(context.Background())
				for {
					pid, err := syncRep(ctx, conn)
					if err == nil && tc.stop {
						stopRun(errors.New("terminated signal received")) // as signal.NotifyContext names SIGTERM
					}
					if err == nil && tc.operatorCancels {
						if tc.cut {
							closeCut() // the run's answer is lost first:
							<-cutDone  // the server's answer to the cancelled COMMIT must not reach it
						}
						_, err = conn.Exec(ctx, `SELECT pg_cancel_backend($1)`, pid)
					}
					if err == nil && tc.operatorTerminates {
						_, err = conn.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid)
					}
					if err == nil || !errors.Is(err, pgx.ErrNoRows) {
						if err != nil {
							err = fmt.Errorf("waiting for the COMMIT to wait in SyncRep: %w", err)
						}
						watchErr <- err
						return
					}
					time.Sleep(20 * time.Millisecond)
				}
			}()

			cfg := e.config()
			cfg.Postgres.DSN = dsn + "&synchronous_commit=on"
			var logs bytes.Buffer
			_, err := Materialize(runCtx, cfg, Env{Dir: kestra.Dir{Path: t.TempDir()}, Log: slog.New(slog.NewTextHandler(&logs, nil)), hooks: hooks{inDoubtWaitOverride: 3 * time.Second, commitTimeout: tc.commitTimeout}})
			if werr := <-watchErr; werr != nil {
				t.Fatalf("%v; run: %v", werr, err)
			}
			if n := cancels.Load(); n != 0 {
				t.Errorf("the run sent %d cancel requests after its COMMIT; want none (a cancel commits the waiting COMMIT on this server alone)", n)
			}
			ctx := testCtx(t, time.Minute)
			if tc.operatorCancels || tc.operatorTerminates {
				if err != nil {
					t.Fatalf("run: %v; want a success (the cancelled wait commits on this server)", err)
				}
				wants := []string{"level=WARN", "this batch is in; this server's COMMITs wait for synchronous standbys " +
					"(synchronous_standby_names: changesink_absent_standby), and whether one confirmed this batch is not known here", "pg_stat_replication"}
				if !tc.cut {
					// The answer came: the server's WARNING is what tells.
					wants = []string{"level=WARN", "the batch is committed, and PostgreSQL warned as it committed: " +
						"canceling wait for synchronous replication due to user request (The transaction has already committed locally, " +
						"but might not have been replicated to the standby.)", "committed on this server alone", "pg_stat_replication"}
				}
				if tc.operatorTerminates {
					wants = []string{"level=WARN", "the connection was lost after COMMIT was sent", "this batch is in; PostgreSQL warned " +
						"before the connection ended: canceling the wait for synchronous replication and terminating connection due to " +
						"administrator command (The transaction has already committed locally, but might not have been replicated to the standby.)",
						"committed on this server alone", "pg_stat_replication"}
				}
				if n := strings.Count(logs.String(), "level=WARN"); n != 1 {
					t.Errorf("%d WARN lines, want one:\n%s", n, logs.String())
				}
				for _, want := range wants {
					if !strings.Contains(logs.String(), want) {
						t.Errorf("the log does not say %q:\n%s", want, logs.String())
					}
				}
			} else {
				pid, perr := syncRep(ctx, admin)
				if perr != nil {
					t.Fatalf("after the run, no backend waits in SyncRep (%v); run: %v", perr, err)
				}
				testenv.CheckHinted(t, err, Hint, outcome.Transient, ErrCommitWaitsForStandby, e.topic, tc.lost,
					fmt.Sprintf("backend pid %d still waits for a synchronous standby to confirm transaction", pid),
					"wait event IPC/SyncRep", "synchronous_standby_names", "pg_stat_replication",
					"SELECT pg_cancel_backend(<pid>) ends the wait but keeps the commit on this server only")
				if strings.Contains(err.Error()+Hint(err), "ends it uncommitted") {
					t.Errorf("the message gives the idle-in-transaction remedy, which would keep the commit:\n%v", err)
				}
				if next, _, _ := e.positions(t); next["0"] != 0 {
					t.Errorf("while the COMMIT waits, positions %v are visible; want none", next)
				}
				// The retry meanwhile: the lock's holder is the waiting backend.
				_, err = Materialize(testCtx(t, time.Minute), e.config(), Env{Dir: kestra.Dir{Path: t.TempDir()}, Log: slog.New(slog.DiscardHandler)})
				testenv.CheckHinted(t, err, Hint, outcome.Transient, ErrLocked, e.topic, fmt.Sprintf("PostgreSQL backend pid %d", pid),
					"wait event IPC/SyncRep: its COMMIT waits for a synchronous standby (synchronous_standby_names) to confirm it",
					"bring the standby back (pg_stat_replication) or change synchronous_standby_names: ending or cancelling that backend")
				if strings.Contains(err.Error()+Hint(err), "if its run is gone") {
					t.Errorf("the lock message offers pg_terminate_backend as a way out, which commits the batch:\n%v", err)
				}
				if _, err := admin.Exec(ctx, `SELECT pg_cancel_backend($1)`, pid); err != nil {
					t.Fatal(err)
				}
				waitForSessions(t, e, 10*time.Second, 20*time.Millisecond, "the wait to end", func(n int) bool { return n == 0 }, `wait_event = 'SyncRep'`)
			}
			if next, _, _ := e.positions(t); next["0"] != 2 || len(e.records(t)) != 2 {
				t.Fatalf("positions %v, %d records; want the batch committed (next offset 2, 2 records)", next, len(e.records(t)))
			}
			if res := e.mustRun(t); res.Consumed != 0 {
				t.Errorf("the run after consumed %d, want 0 (nothing twice)", res.Consumed)
			}
		})
	}
}

// TestInDoubtKeepsTheServersWarning: when what became of a lost COMMIT
// cannot be told (here: no new connection), the message still quotes the
// WARNING the server sent before the connection ended, the strongest word
// the run has that the batch committed (pg_terminate_backend of a COMMIT
// waiting for a synchronous standby).
func TestInDoubtKeepsTheServersWarning(t *testing.T) {
	cc, err := pgx.ParseConfig("postgres://changesink@" + testenv.ClosedAddr(t) + "/changesink?sslmode=disable&connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	d := inDoubt{xid: 42, pid: 7, topic: "orders", wait: time.Second}
	warning := "canceling the wait for synchronous replication and terminating connection due to administrator command " +
		"(The transaction has already committed locally, but might not have been replicated to the standby.)"
	err = d.resolve(context.Background(), cc, io.ErrUnexpectedEOF, []string{warning}, slog.New(slog.DiscardHandler))
	testenv.CheckHinted(t, err, Hint, outcome.Transient, ErrCommitInDoubt, "so PostgreSQL may have committed this batch or not",
		"PostgreSQL warned before the connection ended: "+warning, "committed on this server alone")
	err = d.resolve(context.Background(), cc, io.ErrUnexpectedEOF, nil, slog.New(slog.DiscardHandler))
	if strings.Contains(err.Error(), "warned") {
		t.Errorf("without a WARNING the message quotes one: %v", err)
	}
}
