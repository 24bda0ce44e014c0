package slot

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
	"github.com/jackc/pgx/v5"
)

// health reads the slot's Health through a connection of its own.
func (s *source) health(slot string) Health {
	s.t.Helper()
	ctx := testCtx(s.t, time.Minute)
	conn, err := pgx.Connect(ctx, s.dsn)
	if err != nil {
		s.t.Fatal(err)
	}
	defer conn.Close(ctx)
	h, err := ReadHealth(ctx, conn.PgConn(), slot)
	if err != nil {
		s.t.Fatal(err)
	}
	return h
}

func commitLSNs(txs []txRead) []LSN {
	out := make([]LSN, len(txs))
	for i, tx := range txs {
		out[i] = tx.commit.LSN
	}
	return out
}

// drainQuiet reads until the stream reports it has caught up (a keepalive
// or an idle timeout between transactions) and fails if a transaction
// arrives first.
func drainQuiet(t *testing.T, st *Stream) {
	t.Helper()
	ctx := testCtx(t, time.Minute)
	for {
		ev, err := st.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		switch ev.Kind {
		case KindKeepalive, KindIdle:
			return
		default:
			t.Fatalf("after the last transaction expected, a %s event: %s", ev.Kind, render(ev))
		}
	}
}

// TestRestartRedeliversExactlyTheUnconfirmed: a stream restarted after a
// confirm delivers exactly the transactions that commit after the
// confirmed position, compared by commit LSN, none before; one restarted
// without a confirm delivers them all again; the slot's
// confirmed_flush_lsn is what was confirmed, never what was only read.
func TestRestartRedeliversExactlyTheUnconfirmed(t *testing.T) {
	src := newSource(t)
	src.exec("CREATE TABLE r (id int PRIMARY KEY, v text)")
	slot := slotName(t)
	pub := slot + "_pub"
	res := src.setup(slot, pub, "r")
	for i := 1; i <= 10; i++ {
		src.exec(fmt.Sprintf("INSERT INTO r VALUES (%d, 'v%d')", i, i))
	}

	st := src.start(slot, pub)
	all := readTxs(t, st, 10)
	drainQuiet(t, st)
	if all[0].commit.LSN <= res.ConsistentPoint {
		t.Errorf("first commit %s not after the consistent point %s", all[0].commit.LSN, res.ConsistentPoint)
	}
	st.Close()
	if h := src.health(slot); h.Confirmed != res.ConsistentPoint {
		t.Errorf("after reading without a confirm, confirmed_flush_lsn %s, want the consistent point %s", h.Confirmed, res.ConsistentPoint)
	}

	st = src.start(slot, pub)
	again := readTxs(t, st, 10)
	if !slices.Equal(commitLSNs(again), commitLSNs(all)) {
		t.Fatalf("without a confirm, redelivered commits %v, want %v", commitLSNs(again), commitLSNs(all))
	}
	ctx := testCtx(t, time.Minute)
	if err := st.Confirm(ctx, all[3].commit.End); err != nil {
		t.Fatal(err)
	}
	if err := st.Confirm(ctx, all[1].commit.End); err != nil { // going back is ignored
		t.Fatal(err)
	}
	if st.Confirmed() != all[3].commit.End {
		t.Errorf("Confirmed() %s, want %s", st.Confirmed(), all[3].commit.End)
	}
	err := st.Confirm(ctx, all[9].commit.End+1)
	if !errors.Is(err, ErrConfirmAhead) || outcome.Classify(err) != outcome.Internal {
		t.Errorf("confirm past the last commit: %v (%s), want ErrConfirmAhead, internal", err, outcome.Classify(err))
	}
	st.Close()
	if h := src.health(slot); h.Confirmed != all[3].commit.End {
		t.Errorf("confirmed_flush_lsn %s, want the fourth commit's end %s", h.Confirmed, all[3].commit.End)
	}

	st = src.start(slot, pub)
	rest := readTxs(t, st, 6)
	drainQuiet(t, st)
	if !slices.Equal(commitLSNs(rest), commitLSNs(all[4:])) {
		t.Errorf("after confirming the fourth, redelivered commits %v, want %v", commitLSNs(rest), commitLSNs(all[4:]))
	}
	for i, tx := range rest {
		if want := fmt.Sprintf("insert public.r (t:%d t:v%d)", i+5, i+5); !slices.Contains(tx.lines, want) {
			t.Errorf("redelivered transaction %d: %q, want %q in it", i+1, tx.lines, want)
		}
	}
}

// TestWalsenderKilledMidTransaction: the server ending the stream in the
// middle of a large transaction (pg_terminate_backend of the walsender) is
// a transient ErrConnLost, and a new stream delivers that transaction
// again from its Begin, whole and in order, then the ones after it.
func TestWalsenderKilledMidTransaction(t *testing.T) {
	src := newSource(t)
	src.exec("CREATE TABLE k (id int PRIMARY KEY, v text)")
	slot := slotName(t)
	pub := slot + "_pub"
	src.setup(slot, pub, "k")
	const rows = 200000 // 25 MB of output: more than the socket buffers hold, so the kill comes mid-send
	src.exec("INSERT INTO k VALUES (0, 'first')",
		fmt.Sprintf("INSERT INTO k SELECT g, repeat('x', 100) FROM generate_series(1, %d) g", rows),
		"INSERT INTO k VALUES (-1, 'last')")

	ctx := testCtx(t, 2*time.Minute)
	st := src.start(slot, pub)
	first := readTxs(t, st, 1)[0]
	if err := st.Confirm(ctx, first.commit.End); err != nil {
		t.Fatal(err)
	}
	var big Begin
	for n := 0; n < 100; {
		ev, err := st.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		switch ev.Kind {
		case KindBegin:
			big = ev.Tx
		case KindInsert:
			n++
		}
	}
	src.exec(fmt.Sprintf("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = '%s'", slot))
	var err error
	for err == nil {
		var ev *Event
		ev, err = st.Next(ctx)
		if err == nil && ev.Kind == KindCommit {
			t.Fatalf("the transaction committed at %s arrived whole although its walsender was terminated", ev.Commit.LSN)
		}
	}
	if !errors.Is(err, ErrConnLost) || outcome.Classify(err) != outcome.Transient {
		t.Fatalf("after the walsender was terminated: %v (%s), want ErrConnLost, transient", err, outcome.Classify(err))
	}
	if _, again := st.Next(ctx); !errors.Is(again, ErrConnLost) {
		t.Errorf("Next after the loss: %v, want the same error", again)
	}
	st.Close()

	st = src.start(slot, pub) // waits for the terminated walsender to let go of the slot
	txs := readTxs(t, st, 2)
	if txs[0].begin.Xid != big.Xid || txs[0].commit.LSN != big.FinalLSN {
		t.Fatalf("resumed with the transaction of xid %d committing at %s, want xid %d at %s",
			txs[0].begin.Xid, txs[0].commit.LSN, big.Xid, big.FinalLSN)
	}
	inserts := txs[0].lines[2 : len(txs[0].lines)-1] // after begin and relation, before commit
	if len(inserts) != rows {
		t.Fatalf("the resumed transaction has %d changes, want %d", len(inserts), rows)
	}
	for i, line := range inserts {
		if want := fmt.Sprintf("insert public.k (t:%d t:<%d bytes>)", i+1, 100); line != want {
			t.Fatalf("change %d: %q, want %q", i+1, line, want)
		}
	}
	if want := "insert public.k (t:-1 t:last)"; !slices.Contains(txs[1].lines, want) {
		t.Errorf("then %q, want %q", txs[1].lines, want)
	}
}

// TestQuietPublicationReleasesWAL: while the slot's publication is quiet
// and another table (or another database) writes, the stream reports
// keepalives; confirming IdlePosition moves confirmed_flush_lsn and
// restart_lsn forward, so the slot does not retain that WAL; a change to
// the quiet table is still delivered after it; the stream reports itself
// idle although keepalives keep coming; and IdlePosition is not offered
// while a delivered transaction is unconfirmed.
func TestQuietPublicationReleasesWAL(t *testing.T) {
	for _, where := range []string{"another table", "another database"} {
		t.Run(where, func(t *testing.T) {
			src := newSource(t)
			src.exec("CREATE TABLE quiet (id int PRIMARY KEY)", "CREATE TABLE busy (id bigserial PRIMARY KEY, pad text)")
			busyDSN := src.dsn
			if where == "another database" {
				busyDSN = testenv.CreateDatabase(t, src.admin, testenv.UniqueName(t, "slot_busy_"), "")
				execDSN(t, busyDSN, "CREATE TABLE busy (id bigserial PRIMARY KEY, pad text)")
			}
			slot := slotName(t)
			pub := slot + "_pub"
			src.setup(slot, pub, "quiet")
			before := src.health(slot)
			unread := slot + "_unread" // a slot nobody streams: it keeps what it had
			src.dropSlotAtEnd(unread)
			src.exec("SELECT pg_create_logical_replication_slot('" + unread + "', 'pgoutput')")
			unreadBefore := src.health(unread)

			ctx, cancel := context.WithCancel(testCtx(t, 3*time.Minute))
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { // the busy writer, until the test has seen what it waits for
				defer wg.Done()
				conn, err := pgx.Connect(ctx, busyDSN)
				if err != nil {
					return
				}
				defer conn.Close(context.Background())
				for i := 0; ctx.Err() == nil; i++ {
					_, _ = conn.Exec(ctx, "INSERT INTO busy (pad) SELECT repeat('b', 200) FROM generate_series(1, 500)")
					if i%50 == 25 {
						_, _ = conn.Exec(ctx, "CHECKPOINT") // logs the running transactions restart_lsn moves by
					}
					time.Sleep(20 * time.Millisecond)
				}
			}()
			defer func() { cancel(); wg.Wait() }()

			st := src.start(slot, pub) // IdleTimeout 2 s
			var after Health
			var keepalives, idles int
			for deadline := time.Now().Add(2 * time.Minute); ; {
				ev, err := st.Next(ctx)
				if err != nil {
					t.Fatal(err)
				}
				switch ev.Kind {
				case KindKeepalive:
					keepalives++
				case KindIdle:
					idles++
				default:
					t.Fatalf("a %s event from the quiet publication: %s", ev.Kind, render(ev))
				}
				if pos, ok := st.IdlePosition(); ok {
					if err := st.Confirm(ctx, pos); err != nil {
						t.Fatal(err)
					}
				}
				after = src.health(slot)
				if after.Restart > before.Restart && after.Confirmed > before.Confirmed && idles > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after 2 minutes of keepalive confirms, restart_lsn %s -> %s, confirmed_flush_lsn %s -> %s; "+
						"%d keepalives, %d idle events", before.Restart, after.Restart, before.Confirmed, after.Confirmed, keepalives, idles)
				}
			}
			if after.Confirmed > after.Current || after.Restart > after.Confirmed {
				t.Errorf("positions out of order: restart %s, confirmed %s, current %s", after.Restart, after.Confirmed, after.Current)
			}
			if u := src.health(unread); u.Restart != unreadBefore.Restart || u.RetainedBytes <= unreadBefore.RetainedBytes {
				t.Errorf("the unread slot: restart_lsn %s -> %s, retained %d -> %d bytes; want it kept, retaining more",
					unreadBefore.Restart, u.Restart, unreadBefore.RetainedBytes, u.RetainedBytes)
			}

			src.exec("INSERT INTO quiet VALUES (1)")
			var commit Commit
			for commit.End == 0 {
				ev, err := st.Next(ctx)
				if err != nil {
					t.Fatal(err)
				}
				switch ev.Kind {
				case KindCommit:
					commit = ev.Commit
				case KindInsert:
					if got := render(ev); got != "insert public.quiet (t:1)" {
						t.Errorf("the quiet table's change: %s", got)
					}
				}
			}
			if commit.LSN <= after.Confirmed {
				t.Errorf("the quiet table's commit at %s, not after the confirmed %s", commit.LSN, after.Confirmed)
			}
			for {
				ev, err := st.Next(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if ev.Kind == KindKeepalive {
					break
				}
			}
			if pos, ok := st.IdlePosition(); ok {
				t.Fatalf("IdlePosition offered %s while the commit ending at %s is unconfirmed", pos, commit.End)
			}
			if err := st.Confirm(ctx, commit.End); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestLargeTransactionsAndManyTables: a transaction larger than
// logical_decoding_work_mem (spilled to disk by the server) arrives whole
// and in order; one transaction touching 60 tables, and 60 more, one per
// table, arrive with each table's Relation before its first change.
func TestLargeTransactionsAndManyTables(t *testing.T) {
	src := newSource(t)
	const tables = 60
	var names []string
	var ddl []string
	for i := range tables {
		names = append(names, fmt.Sprintf("m%02d", i))
		ddl = append(ddl, fmt.Sprintf("CREATE TABLE m%02d (id int PRIMARY KEY, v text)", i))
	}
	ddl = append(ddl, "CREATE TABLE large (id int PRIMARY KEY, pad text)")
	src.exec(ddl...)
	slot := slotName(t)
	pub := slot + "_pub"
	src.setup(slot, pub, append(names, "large")...)

	const rows = 150000 // 150,000 rows of 500 bytes: 75 MB, past the 64 MB logical_decoding_work_mem
	var all strings.Builder
	all.WriteString("BEGIN;")
	for i := range tables {
		fmt.Fprintf(&all, "INSERT INTO m%02d VALUES (%d, 'together');", i, i)
	}
	all.WriteString("COMMIT")
	stmts := []string{fmt.Sprintf("INSERT INTO large SELECT g, repeat('p', 500) FROM generate_series(1, %d) g", rows), all.String()}
	for i := range tables {
		stmts = append(stmts, fmt.Sprintf("INSERT INTO m%02d VALUES (%d, 'alone')", i, 1000+i))
	}
	src.exec(stmts...)

	st := src.start(slot, pub)
	ctx := testCtx(t, 3*time.Minute)
	var n int
	for n < rows+1 {
		ev, err := st.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		switch ev.Kind {
		case KindInsert:
			n++
			if id := string(ev.New.Values[0].Data); id != fmt.Sprint(n) || len(ev.New.Values[1].Data) != 500 {
				t.Fatalf("change %d of the large transaction: id %s, %d bytes", n, id, len(ev.New.Values[1].Data))
			}
		case KindCommit:
			if n != rows {
				t.Fatalf("the large transaction committed after %d changes, want %d", n, rows)
			}
			n++
		}
	}
	together := readTxs(t, st, 1)[0].lines
	var want []string
	for i := range tables {
		want = append(want, fmt.Sprintf("relation public.m%02d [id 23 key, v 25] identity d", i),
			fmt.Sprintf("insert public.m%02d (t:%d t:together)", i, i))
	}
	if got := together[1 : len(together)-1]; !slices.Equal(got, want) {
		t.Errorf("the transaction of %d tables:\n\t%q\nwant\n\t%q", tables, got, want)
	}
	for i, tx := range readTxs(t, st, tables) {
		if want := []string{"begin", fmt.Sprintf("insert public.m%02d (t:%d t:alone)", i, 1000+i), "commit"}; !slices.Equal(tx.lines, want) {
			t.Errorf("transaction %d: %q, want %q", i+1, tx.lines, want)
		}
	}
}

// TestIdleTimeout: with nothing to stream and everything confirmed (so the
// server sends no keepalive), Next reports KindIdle after IdleTimeout; a
// context ending is reported as its error and the stream stays usable.
func TestIdleTimeout(t *testing.T) {
	src := newSource(t)
	src.exec("CREATE TABLE i (id int PRIMARY KEY)")
	slot := slotName(t)
	pub := slot + "_pub"
	src.setup(slot, pub, "i")
	ctx := testCtx(t, time.Minute)
	st, err := Start(ctx, src.pg, StreamConfig{Slot: slot, Publications: []string{pub}, IdleTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	idle := 0
	for idle < 2 {
		ev, err := st.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		switch ev.Kind {
		case KindIdle:
			idle++
		case KindKeepalive:
			if pos, ok := st.IdlePosition(); ok {
				if err := st.Confirm(ctx, pos); err != nil {
					t.Fatal(err)
				}
			}
		default:
			t.Fatalf("a %s event", ev.Kind)
		}
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	st.cfg.IdleTimeout = 0 // from now on, only the context ends a wait
	for {
		// Keepalives may come meanwhile (the server's WAL moves with
		// other databases' writes); the wait must end at the deadline.
		ev, err := st.Next(short)
		if err == nil && ev.Kind == KindKeepalive {
			continue
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Next with a context that ends: %v (event %v), want its deadline", err, ev)
		}
		break
	}
	src.exec("INSERT INTO i VALUES (1)")
	if got := transcript(t, st, 1); !slices.Contains(got, "insert public.i (t:1)") {
		t.Errorf("after the context's end, the stream read %q", got)
	}
}

// TestCommitOrder: transactions arrive in the order they commit, not the
// order they began or wrote: one that began first and commits last
// arrives last, whole.
func TestCommitOrder(t *testing.T) {
	src := newSource(t)
	src.exec("CREATE TABLE co (id int PRIMARY KEY, who text)")
	slot := slotName(t)
	pub := slot + "_pub"
	src.setup(slot, pub, "co")
	ctx := testCtx(t, time.Minute)
	early, err := pgx.Connect(ctx, src.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer early.Close(ctx)
	tx, err := early.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO co VALUES (1, 'began first')"); err != nil {
		t.Fatal(err)
	}
	src.exec("INSERT INTO co VALUES (2, 'began second')")
	if _, err := tx.Exec(ctx, "INSERT INTO co VALUES (3, 'began first')"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	st := src.start(slot, pub)
	txs := readTxs(t, st, 2)
	got := append(append([]string{}, txs[0].lines[1:]...), txs[1].lines[1:]...)
	want := []string{
		"relation public.co [id 23 key, who 25] identity d", "insert public.co (t:2 t:began second)", "commit",
		"insert public.co (t:1 t:began first)", "insert public.co (t:3 t:began first)", "commit",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n\t%q\nwant\n\t%q", got, want)
	}
	if txs[0].commit.LSN >= txs[1].commit.LSN || txs[0].begin.Xid <= txs[1].begin.Xid {
		t.Errorf("commits %s, %s of xids %d, %d: want the later xid first, in commit order", txs[0].commit.LSN,
			txs[1].commit.LSN, txs[0].begin.Xid, txs[1].begin.Xid)
	}
}

// TestNetworkStallAndCut: through a proxy, a connection that stops passing
// bytes in the middle of a transaction makes Next return its context's
// deadline, and the stream goes on where it was once bytes pass again
// (nothing lost or repeated); a connection cut by the network is a
// transient ErrConnLost.
func TestNetworkStallAndCut(t *testing.T) {
	src := newSource(t)
	src.exec("CREATE TABLE nc (id int PRIMARY KEY, pad text)")
	slot := slotName(t)
	pub := slot + "_pub"
	src.setup(slot, pub, "nc")
	const rows = 100000
	src.exec(fmt.Sprintf("INSERT INTO nc SELECT g, repeat('n', 200) FROM generate_series(1, %d) g", rows))

	proxy := testenv.StartProxy(t, fmt.Sprintf("%s:%d", src.pg.Host, src.pg.Port), testenv.ProxyOptions{})
	pg := src.pg.Copy()
	host, port, _ := strings.Cut(proxy.Addr(), ":")
	pg.Host = host
	fmt.Sscan(port, &pg.Port)
	ctx := testCtx(t, 2*time.Minute)
	st, err := Start(ctx, pg, StreamConfig{Slot: slot, Publications: []string{pub}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	next := 1
	read := func(ctx context.Context, until int) error {
		for next <= until {
			ev, err := st.Next(ctx)
			if err != nil {
				return err
			}
			if ev.Kind == KindInsert {
				if got := string(ev.New.Values[0].Data); got != fmt.Sprint(next) {
					t.Fatalf("change %d has id %s", next, got)
				}
				next++
			}
		}
		return nil
	}
	if err := read(ctx, 10); err != nil {
		t.Fatal(err)
	}
	proxy.Freeze()
	stalled, cancel := context.WithTimeout(ctx, 2*time.Second)
	err = read(stalled, rows)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a stalled connection: %v after %d changes, want the context's deadline", err, next-1)
	}
	if next > rows {
		t.Fatalf("all %d changes arrived through a frozen proxy", rows)
	}
	proxy.Thaw()
	if err := read(ctx, rows/2); err != nil {
		t.Fatalf("after the stall, at change %d: %v", next, err)
	}
	proxy.Close()
	err = read(ctx, rows)
	if !errors.Is(err, ErrConnLost) || outcome.Classify(err) != outcome.Transient {
		t.Fatalf("a cut connection: %v (%s), want ErrConnLost, transient", err, outcome.Classify(err))
	}
}

// TestStartReadsSettings: Start reads the settings it is given with SHOW
// on the replication connection, as the walsender prints values under
// them, hands them to CheckSettings, and returns its error.
func TestStartReadsSettings(t *testing.T) {
	src := newSource(t)
	slot := slotName(t)
	pub := slot + "_pub"
	src.exec("CREATE TABLE st (id int PRIMARY KEY)")
	src.setup(slot, pub, "st")
	ctx := testCtx(t, time.Minute)
	pg := src.pg.Copy()
	pg.RuntimeParams["DateStyle"] = "SQL, DMY"
	var got map[string]string
	refused := errors.New("refused by the check")
	_, err := Start(ctx, pg, StreamConfig{Slot: slot, Publications: []string{pub}, Settings: []string{"DateStyle", "bytea_output"},
		CheckSettings: func(s map[string]string) error { got = s; return refused }})
	if !errors.Is(err, refused) {
		t.Fatalf("Start: %v, want the check's error", err)
	}
	if got["DateStyle"] != "SQL, DMY" || got["bytea_output"] != "hex" {
		t.Errorf("settings read %v", got)
	}
	if _, err := Start(ctx, pg, StreamConfig{Slot: slot, Publications: []string{pub}, Settings: []string{"DateStyle; SELECT 1"},
		CheckSettings: func(map[string]string) error { return nil }}); !errors.Is(err, ErrConfig) {
		t.Errorf("a setting name that is not one: %v", err)
	}
}
