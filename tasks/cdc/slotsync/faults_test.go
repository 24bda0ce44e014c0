package slotsync

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/slot"
)

// The fault tests of cdc sync: the source restarted, ClickHouse cut, the
// replication connection dropped, each in the middle of a run. The
// promise under each: the run fails transient (exit 3) with an error that
// says what went away; the slot is never confirmed past the sync ledger's
// last row (written only after every target's read-back); and a re-run
// converges, the live view equal to the source row by row.

// accEnv is a sync test's env on the PostgreSQL server admin reaches, with
// the table acc (1000 rows, some with TOASTed blobs) set up
// and loaded, and the config that syncs it.
func accEnv(t *testing.T, admin string) (*syncEnv, Config, Env) {
	t.Helper()
	e := newSyncEnvAt(t, admin)
	e.tables = []string{"public.acc"}
	e.exec(`CREATE TABLE acc (id bigint PRIMARY KEY, v bigint NOT NULL, tag text, blob text)`,
		`ALTER TABLE acc ALTER COLUMN blob SET STORAGE EXTERNAL`,
		`INSERT INTO acc SELECT i, i, 'tag '||i, CASE WHEN i % 10 = 0 THEN repeat(md5(i::text), 100) END FROM generate_series(1, 1000) i`)
	cfg, env := e.config()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := SetupSync(ctx, cfg, env); err != nil {
		t.Fatal(err)
	}
	return e, cfg, env
}

// sameAcc compares acc with its live view, row by row.
func (e *syncEnv) sameAcc() {
	e.t.Helper()
	e.sameAccOf("acc")
}

// sameAccOf compares a table of acc's columns with its live view, row by
// row.
func (e *syncEnv) sameAccOf(table string) {
	e.t.Helper()
	e.same(`SELECT id::text, v::text, tag, md5(blob) FROM `+table+` ORDER BY `+table+`.id`,
		`SELECT id, v, tag, lower(hex(MD5(blob))) FROM `+e.chDB+`.`+table+`_live ORDER BY id`)
}

// backlog commits n transactions on acc, each an update of ten rows and an
// insert, for a run to read.
func (e *syncEnv) backlog(n int) {
	e.t.Helper()
	e.exec(fmt.Sprintf(`DO $$ BEGIN FOR i IN 1..%d LOOP
		UPDATE acc SET v = v + 1, tag = 'b'||i WHERE id %% 100 = i %% 100 AND id <= 1000;
		INSERT INTO acc VALUES (100000 + i, i, 'backlog', NULL);
		COMMIT; END LOOP; END $$`, n))
}

// slotConfirmed is the slot's confirmed_flush_lsn on the source.
func (e *syncEnv) slotConfirmed() slot.LSN {
	e.t.Helper()
	got := e.rows(`SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = '` + e.slot + `'`)
	if len(got) != 1 {
		e.t.Fatalf("slot %s: %v", e.slot, got)
	}
	lsn, err := pglogrepl.ParseLSN(got[0])
	if err != nil {
		e.t.Fatal(err)
	}
	return lsn
}

// ledgerThrough is the position of the sync ledger's last row of the slot,
// and how many rows it has.
func (e *syncEnv) ledgerThrough() (slot.LSN, int) {
	e.t.Helper()
	got := e.ch.query(`SELECT through_lsn FROM `+e.chDB+`._changesink_sync WHERE slot = ? ORDER BY seq`, e.slot)
	if len(got) == 0 {
		return 0, 0
	}
	n, err := strconv.ParseUint(got[len(got)-1], 10, 64)
	if err != nil {
		e.t.Fatal(err)
	}
	return slot.LSN(n), len(got)
}

// confirmedWithinLedger fails the test when the slot is confirmed past the
// sync ledger's last row: a position no read-back passed for. It returns
// both.
func (e *syncEnv) confirmedWithinLedger() (confirmed, through slot.LSN) {
	e.t.Helper()
	confirmed = e.slotConfirmed()
	through, _ = e.ledgerThrough()
	if confirmed > through {
		e.t.Errorf("the slot is confirmed at %s, past the sync ledger's last row at %s", confirmed, through)
	}
	return confirmed, through
}

// resetup is the remedy the refusals' hints name: drop the slot, run the
// setup (a new slot, its snapshot loaded into the same targets), sync
// until caught up; the targets must then equal the source.
func (e *syncEnv) resetup(ctx context.Context, cfg Config, env Env) {
	e.t.Helper()
	e.dropSlot()
	if _, err := SetupSync(ctx, cfg, env); err != nil {
		e.t.Fatal(err)
	}
	e.catchUp(ctx, cfg, env)
	e.sameAcc()
}

// catchUp runs Sync until a run finds nothing new.
func (e *syncEnv) catchUp(ctx context.Context, cfg Config, env Env) {
	e.t.Helper()
	for range 20 {
		res, err := Sync(ctx, cfg, env)
		if err != nil {
			e.t.Fatalf("re-run: %v", err)
		}
		if res.Transactions == 0 && res.Why == "caught up" {
			return
		}
	}
	e.t.Fatal("20 runs did not catch up")
}

// nth returns a hook that runs f at its n-th call, and nothing at the
// others.
func nth(n int, f func(context.Context) error) func(context.Context) error {
	var mu sync.Mutex
	calls := 0
	return func(ctx context.Context) error {
		mu.Lock()
		calls++
		c := calls
		mu.Unlock()
		if c == n {
			return f(ctx)
		}
		return nil
	}
}

// TestSyncSourceRestarted restarts the source (a cluster of the test's
// own: the shared one serves others) in the middle of a run that has a
// backlog to read, in both of pg_ctl's modes: fast (sessions ended, a
// checkpoint) and immediate (a crash: the slot's confirmed position is
// the one last saved, which may be behind what was confirmed), and at two
// moments: while the run applies its third flush (a crash done before the
// flush is recorded and confirmed; a fast shutdown begun then, which waits
// for the run to take what the walsender sent) and while it streams (the
// restart begun then, the run going on meanwhile). The run fails
// transient, naming the lost replication connection (or, after a fast
// shutdown, it may have read everything before the walsender exited: then
// it ends well having applied all of it); the slot is not confirmed past
// the sync ledger; a re-run converges.
func TestSyncSourceRestarted(t *testing.T) {
	for _, mode := range []string{"fast", "immediate"} {
		for _, when := range []string{"while applying", "while streaming"} {
			t.Run(mode+"/"+when, func(t *testing.T) {
				pg := testenv.PrivatePostgres(t, "wal_level = logical")
				e, cfg, env := accEnv(t, pg.Admin)
				e.backlog(400)
				cfg.FlushChanges = 100
				restarted := make(chan struct{})
				restart := func(context.Context) error {
					defer close(restarted)
					pg.Restart(t, mode)
					return nil
				}
				switch {
				case when == "while applying" && mode == "immediate":
					env.Hooks.AfterInsert = nth(3, restart)
				case when == "while applying":
					// A fast shutdown waits for every walsender's client to
					// take the WAL sent, and the run says it is alive while
					// it applies: the flush goes on once the shutdown began.
					env.Hooks.AfterInsert = nth(3, func(ctx context.Context) error {
						go restart(ctx) //nolint:errcheck
						shuttingDown(t, pg.Admin)
						return nil
					})
				default:
					env.Hooks.AfterInsert = nth(3, func(ctx context.Context) error { go restart(ctx); return nil }) //nolint:errcheck
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				defer cancel()
				res, err := Sync(ctx, cfg, env)
				<-restarted
				switch {
				case err != nil && strings.Contains(err.Error(), "read the catalog entries"):
					// The run applied what it read, and the source went away
					// before its check of the catalog at the end: transient,
					// the next run checks.
					t.Logf("error: %v", err)
					if outcome.Classify(err) != outcome.Transient {
						t.Errorf("a lost catalog connection at the run's end: class %v, want transient", outcome.Classify(err))
					}
				case err != nil:
					t.Logf("error: %v", err)
					wantError(t, err, outcome.Transient, slot.ErrConnLost, "slot "+e.slot, "Retry: a new run resumes from the slot's confirmed position")
				case when == "while applying" && mode == "immediate":
					t.Fatalf("the run succeeded across a crash of the source: %+v", res)
				case res.Transactions != 400:
					t.Fatalf("the run ended well with %d of the 400 transactions across a restart: %+v", res.Transactions, res)
				default:
					// A fast shutdown lets the walsender send what it has
					// decoded, and waits for the run to take it, before it
					// exits: the run may have it all.
					t.Logf("the run read every transaction before the walsender exited: %s", res.Summary())
				}
				confirmed, through := e.confirmedWithinLedger()
				t.Logf("after the restart: slot confirmed at %s, the sync ledger through %s", confirmed, through)

				e.catchUp(ctx, cfg, env)
				e.sameAcc()
				e.confirmedWithinLedger()
			})
		}
	}
}

// shuttingDown waits until the server at dsn refuses new sessions (57P03,
// "the database system is shutting down") or connections.
func shuttingDown(t *testing.T, dsn string) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, dsn)
		cancel()
		if err != nil {
			return
		}
		_ = conn.Close(context.Background())
		time.Sleep(100 * time.Millisecond)
	}
	t.Error("the source did not begin its shutdown within 30 s")
}

// TestSyncClickHouseCut cuts the connection to ClickHouse (a proxy in front
// of it) in the third flush of a run, while a writer changes the source:
// as the insert's statement is sent, in the middle of the insert (its data
// block), as the read-back is sent, and as the sync ledger's row is sent.
// The run fails transient; the slot stays where the last recorded flush
// confirmed it (the sync ledger's last row); a re-run without the proxy
// (which breaks the lock the cut run left) converges.
func TestSyncClickHouseCut(t *testing.T) {
	cuts := []struct {
		name string
		hook string // where the cut is armed
		on   func(e *syncEnv) string
	}{
		{"insert statement", "before the insert", func(e *syncEnv) string { return "INSERT INTO " + mapping.Qualified(e.chDB, "acc") + " (" }},
		// The block's column types: in the insert's data, not in its query
		// (nor in the keys the reads send, which are Int64).
		{"insert data", "before the insert", func(*syncEnv) string { return "Nullable(String)" }},
		{"read-back", "after the insert", func(*syncEnv) string { return " FINAL\nPREWHERE" }},
		{"sync ledger row", "after the insert", func(e *syncEnv) string {
			return "INSERT INTO " + mapping.Qualified(e.chDB, "_changesink_sync")
		}},
	}
	for _, c := range cuts {
		t.Run(c.name, func(t *testing.T) {
			e, cfg, env := accEnv(t, testenv.Lookup(t, "CHANGESINK_TEST_PG")["CHANGESINK_TEST_PG"])
			stop, done := make(chan struct{}), make(chan int, 1)
			go writer(t, e, stop, done)
			defer func() {
				select {
				case <-stop:
				default:
					close(stop)
					<-done
				}
			}()
			time.Sleep(time.Second) // a backlog of more than three flushes
			p, via := e.ch.proxied()
			cut := cfg
			cut.ClickHouse.URL = via
			cut.FlushChanges = 25
			arm := nth(3, func(context.Context) error { p.CutOn([]byte(c.on(e))); return nil })
			cutEnv := env
			if c.hook == "before the insert" {
				cutEnv.Hooks.BeforeInsert = arm
			} else {
				cutEnv.Hooks.AfterInsert = arm
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			res, err := Sync(ctx, cut, cutEnv)
			select {
			case <-p.Done():
			default:
				t.Fatalf("the cut never came (err %v, result %+v)", err, res)
			}
			if err == nil {
				t.Fatalf("the run succeeded with ClickHouse cut: %+v", res)
			}
			t.Logf("error: %v", err)
			wantError(t, err, outcome.Transient, nil, "ClickHouse was unreachable, too slow or dropped the connection")
			confirmed, through := e.confirmedWithinLedger()
			if _, rows := e.ledgerThrough(); rows != 3 {
				t.Errorf("after a cut in the third flush: %d sync ledger rows, want the load's and two flushes'", rows)
			}
			t.Logf("the slot at %s, the sync ledger through %s", confirmed, through)
			close(stop)
			t.Logf("%d writer transactions", <-done)
			e.catchUp(ctx, cfg, env)
			e.sameAcc()
			e.confirmedWithinLedger()
		})
	}
}

// TestSyncReplicationConnectionCut drops the replication connection (a
// proxy in front of PostgreSQL closing that one connection once 1 MB has
// come through it) in the middle of a 7 MB transaction, after small
// transactions a run applied and confirmed one by one. The run fails
// transient (the replication connection lost); the slot stays at the last
// recorded flush; the big transaction was not applied in part; a re-run
// converges.
func TestSyncReplicationConnectionCut(t *testing.T) {
	e, cfg, env := accEnv(t, testenv.Lookup(t, "CHANGESINK_TEST_PG")["CHANGESINK_TEST_PG"])
	e.exec(`UPDATE acc SET v = -1 WHERE id = 1`, `UPDATE acc SET v = -2 WHERE id = 2`, `DELETE FROM acc WHERE id = 3`,
		`INSERT INTO acc SELECT g, g, repeat('x', 200), NULL FROM generate_series(2001, 32000) g`,
		`UPDATE acc SET v = -4 WHERE id = 4`)
	before, _ := e.ledgerThrough()
	const cutAfter = 1 << 20
	var cuts sync.WaitGroup
	cuts.Add(1)
	p := testenv.StartProxy(t, pgHostPort(t, e.dsn), testenv.ProxyOptions{Conn: func(p *testenv.Proxy, client, server net.Conn) {
		go func() { _, _ = copyAll(server, client, 0); server.Close() }()
		if n, _ := copyAll(client, server, cutAfter); n >= cutAfter {
			cuts.Done()
		}
		client.Close()
		server.Close()
	}})
	cut := cfg
	cut.Postgres.DSN = testenv.WithHost(t, e.dsn, p.Addr())
	cut.FlushChanges = 1
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := Sync(ctx, cut, env)
	if err == nil {
		t.Fatalf("the run succeeded with its replication connection cut: %+v", res)
	}
	cuts.Wait()
	t.Logf("error: %v", err)
	wantError(t, err, outcome.Transient, slot.ErrConnLost, "slot "+e.slot, "Retry: a new run resumes from the slot's confirmed position")
	confirmed, through := e.confirmedWithinLedger()
	// The last confirm may not have reached the server before the cut
	// (the slot behind the ledger: a replay for the next run).
	t.Logf("the slot at %s, the sync ledger through %s (at %s before the run)", confirmed, through, before)
	if through <= before {
		t.Errorf("the sync ledger through %s, as before the run: want the small transactions applied first", through)
	}
	if got := e.ch.query(`SELECT count() FROM ` + e.chDB + `.acc_live WHERE id > 2000`); got[0] != "0" {
		t.Errorf("%s rows of the cut transaction in the live view", got[0])
	}
	e.catchUp(ctx, cfg, env)
	e.sameAcc()
}

// pgHostPort is the host:port of a PostgreSQL DSN.
func pgHostPort(t *testing.T, dsn string) string {
	t.Helper()
	c, err := pgconn.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort(c.Host, strconv.Itoa(int(c.Port)))
}

// copyAll copies src to dst until either fails, or (limit > 0) once limit
// bytes have passed; it returns how many did.
func copyAll(dst, src net.Conn, limit int) (int, error) {
	buf := make([]byte, 32<<10)
	n := 0
	for limit <= 0 || n < limit {
		k, err := src.Read(buf)
		if k > 0 {
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return n, werr
			}
			n += k
		}
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return n, nil
			}
			return n, err
		}
	}
	return n, nil
}
