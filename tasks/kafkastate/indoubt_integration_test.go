package kafkastate

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
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
			says: []string{"commit", "PostgreSQL says transaction", "aborted (txid_status): nothing was committed", "re-run"}},
		{name: "commit lost, backend not told", forward: false, reconnect: true, orphan: true,
			says: []string{"commit", "PostgreSQL says transaction", "aborted (txid_status): nothing was committed", "re-run"}},
		{name: "server unreachable after", forward: true, reconnect: false, committed: true,
			says: []string{"commit", "may have committed", "could not be told", "SELECT pg_terminate_backend(", "re-run"}},
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
			res, err := materialize(testCtx(t, 3*time.Minute), cfg, kestra.Dir{Path: t.TempDir()}, slog.New(slog.NewTextHandler(&logs, nil)), hooks{})
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
				testenv.CheckError(t, err, outcome.Transient, nil, append([]string{e.topic}, tc.says...)...)
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
	closed := cc.Copy()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed.Host, closed.Port = "127.0.0.1", uint16(ln.Addr().(*net.TCPAddr).Port)
	closed.Fallbacks = nil
	ln.Close() // nothing listens there now
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
		{"committed, other positions", with(committed, func(d *inDoubt) { batch(d); d.next = `{"0": 999}`; short(d) }), cc,
			"", "kafka_state.positions does not show this batch's positions"},
		{"committed, no positions row", with(committed, func(d *inDoubt) { batch(d); d.topic += "_other"; short(d) }), cc,
			"", "kafka_state.positions does not show this batch's positions"},
		{"aborted", aborted, cc, "aborted", ""},
		{"idle in the transaction", idle.d, cc, "aborted", ""},
		// The terminate statement's conditions, each alone: another
		// backend's pid, another start, for a transaction left idle.
		{"idle, but the pid is another's", with(other.d, func(d *inDoubt) { d.pid = another.d.pid; short(d) }), cc, "", "still in progress after 2s"},
		{"idle, but it started at another time", with(other.d, func(d *inDoubt) { d.start = d.start.Add(-time.Microsecond); short(d) }), cc,
			"", "still in progress after 2s"},
		{"from the future", with(committed, func(d *inDoubt) { d.xid += 1 << 40 }), cc, "", "in the future"},
		{"no server", committed, closed, "", "a new connection failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, err := tc.d.status(ctx, tc.cc)
			if status != tc.status || (tc.says == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.says) {
				t.Errorf("status %q, %v; want %q saying %q", status, err, tc.status, tc.says)
			}
		})
	}
	// The backends that were not the batch's are alive and still in their transactions.
	for name, x := range map[string]txn{"other": other, "another": another} {
		var xid int64
		if err := x.conn.QueryRow(ctx, `SELECT txid_current()`).Scan(&xid); err != nil || xid != x.d.xid {
			t.Errorf("%s backend: txid_current %d, %v; want it alive in transaction %d", name, xid, err, x.d.xid)
		}
	}
	if err := idle.conn.Ping(ctx); err == nil {
		t.Error("the batch's idle backend is still alive")
	}
}
