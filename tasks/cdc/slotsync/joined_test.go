package slotsync

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/changesink/changesink/internal/outcome"
)

// accTable makes a table of acc's columns holding rows 1..rows.
func accTable(name string, rows int) string {
	return fmt.Sprintf(`CREATE TABLE %[1]s (id bigint PRIMARY KEY, v bigint NOT NULL, tag text, blob text);
		INSERT INTO %[1]s SELECT i, i, 'tag '||i, NULL FROM generate_series(1, %d) i`, name, rows)
}

// joinedRE reads the start of the load of acc2, a table that joined the
// publication: begun, or continued with the chunks done.
var joinedRE = regexp.MustCompile(`cdc: (loading|continuing the load \(generation \d+, (\d+) chunks done\) of) public\.acc2, which joined publication`)

// TestSyncTableJoinsUnderKills: a pipeline streams acc; while writers
// change acc and acc2, acc2 joins it: cdc setup runs with both tables,
// adds acc2 to the publication and loads only it, from a snapshot of its
// own, and is killed (SIGKILL) at random moments of that load; the next
// setup continues the load. A sync run while the load has not ended ends
// it itself (it loads every table that waits before it streams). Then sync
// streams both tables, and every row of both live views equals its source
// row; acc was never loaded again.
func TestSyncTableJoinsUnderKills(t *testing.T) {
	e := newSyncEnv(t)
	e.exec(`CREATE TABLE acc (id bigint PRIMARY KEY, v bigint NOT NULL, tag text, blob text)`,
		`INSERT INTO acc SELECT i, i, 'tag '||i, NULL FROM generate_series(1, 1000) i`,
		`CREATE TABLE acc2 (id bigint PRIMARY KEY, v bigint NOT NULL, tag text, blob text)`,
		`ALTER TABLE acc2 ALTER COLUMN blob SET STORAGE EXTERNAL`,
		`INSERT INTO acc2 SELECT i, i, 'tag '||i, CASE WHEN i % 500 = 0 THEN repeat(md5(i::text), 100) END FROM generate_series(-30000, 1000) i WHERE i <> 0`,
		`ANALYZE acc2`)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cfg, env := e.loadConfig("acc")
	if _, err := SetupSync(ctx, cfg, env); err != nil {
		t.Fatal(err)
	}
	if _, err := Sync(ctx, cfg, env); err != nil {
		t.Fatal(err)
	}
	both, env2 := e.loadConfig("acc", "acc2")

	stop, done := make(chan struct{}), make(chan int, 2)
	go writeTo(t, e, "acc", 1, stop, done)
	go writeTo(t, e, "acc2", 7, stop, done)
	rnd := rand.New(rand.NewPCG(8, 9))
	var logs []string
	finished, killed, continued := false, 0, 0
	for i := 0; i < 5 && !finished; i++ {
		var out string
		// Killed at a random moment after the run recorded a chunk of its
		// own, so that the next run continues with chunks done (a delay
		// from the start alone killed every run before its first chunk on
		// a loaded machine).
		before := e.chunksOf("public.acc2")
		chunked := func(log string) bool { return joinedRE.MatchString(log) && e.chunksOf("public.acc2") > before }
		out, finished = runSetupKilled(ctx, t, e, chunked, time.Duration(rnd.IntN(1500))*time.Millisecond, envLoadTables+"=acc,acc2")
		logs = append(logs, fmt.Sprintf("run %d: %s", i, out))
		if !finished {
			killed++
		}
		m := joinedRE.FindStringSubmatch(out)
		if m != nil && m[2] != "" {
			if n, _ := strconv.Atoi(m[2]); n > 0 {
				continued++
			}
		}
	}
	if !finished {
		// Sync ends the load a killed setup left.
		res, err := Sync(ctx, both, env2)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Resynced) != 1 || res.Resynced[0].Table != "public.acc2" || !strings.Contains(res.Resynced[0].Why, "joined publication") {
			t.Errorf("sync after a killed load of a joined table: resynced %+v", res.Resynced)
		}
	}
	close(stop)
	txs := <-done + <-done
	t.Logf("%d writer transactions; %d setup runs killed during the load of acc2, %d continued it with chunks done", txs, killed, continued)
	e.catchUp(ctx, both, env2)
	e.sameAccOf("acc")
	e.sameAccOf("acc2")
	if got := e.ch.query(`SELECT kind, tbl, count() FROM ` + e.chDB + `._changesink_load WHERE kind IN ('start', 'done') GROUP BY kind, tbl ORDER BY kind, tbl`); len(got) < 3 ||
		got[0] != "done\tpublic.acc2\t1" || !strings.HasPrefix(got[1], "start\t\t1") {
		t.Errorf("load ledger: %v (want acc2's load done once, the slot's own load begun once)", got)
	}
	if killed == 0 || continued == 0 {
		t.Errorf("%d runs killed, %d continued with chunks done: the test did not test a continued join", killed, continued)
	}
	if t.Failed() {
		for _, l := range logs {
			t.Log(l)
		}
	}
}

// loadConfig is loadConfig for the test's source, slot and database, its
// log discarded.
func (e *syncEnv) loadConfig(tables ...string) (Config, Env) {
	e.t.Helper()
	cfg, env, err := loadConfig(e.dsn, e.slot, e.chDB, tables...)
	if err != nil {
		e.t.Fatal(err)
	}
	env.Log = slog.New(slog.DiscardHandler)
	return cfg, env
}

// TestSyncEndsWhereATableJoins: a table that joins the publication while
// sync runs ends the run, without a failure, at the first transaction
// that changes it: the transactions before it are applied and confirmed,
// it and the ones after it are not; the ended output says why. Then cdc
// setup with both tables loads the joined one alone, and sync streams
// both from there, every row as in PostgreSQL.
func TestSyncEndsWhereATableJoins(t *testing.T) {
	e := newSyncEnv(t)
	e.exec(accTable("acc", 100), accTable("acc2", 100))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg, env := e.loadConfig("acc")
	if _, err := SetupSync(ctx, cfg, env); err != nil {
		t.Fatal(err)
	}
	e.exec(`UPDATE acc SET tag = 'before' WHERE id <= 10`)
	joining := env
	joining.Hooks.Locked = func(context.Context) error {
		// After the run read the catalog: the table joins, is changed,
		// then acc again.
		e.exec(`ALTER PUBLICATION `+e.pub+` ADD TABLE acc2`, `UPDATE acc2 SET tag = 'joined' WHERE id <= 5`,
			`UPDATE acc SET tag = 'after' WHERE id <= 20`)
		return nil
	}
	res, err := Sync(ctx, cfg, joining)
	if err != nil {
		t.Fatalf("sync where a table joins: %v", err)
	}
	if !strings.Contains(res.Why, "table public.acc2 joined publication "+e.pub+": cdc setup loads it") || res.Transactions != 1 {
		t.Errorf("ended %q after %d transactions; want the join named, after the one before it", res.Why, res.Transactions)
	}
	if got := e.liveIDs2("acc"); got == "" {
		t.Errorf("acc's live view is empty")
	}
	if got := e.ch.query(`SELECT countIf(tag = 'before'), countIf(tag = 'after') FROM ` + e.chDB + `.acc_live`); strings.Join(got, "") != "10\t0" {
		t.Errorf("acc's tags (before, after): %v; want the transaction before the join only", got)
	}
	if c, th := e.confirmedWithinLedger(); c != th {
		t.Errorf("slot at %s, ledger at %s", c, th)
	}
	// Without setup: its target is not there (setup makes it, then loads it).
	if _, err := Sync(ctx, cfg, env); outcome.Classify(err) == outcome.OK || !strings.Contains(err.Error(), "public.acc2") ||
		!strings.Contains(err.Error(), "cdc setup") {
		t.Errorf("sync without setup: %v; want the joined table refused, naming cdc setup", err)
	}
	both, env2 := e.loadConfig("acc", "acc2")
	e.joinAcc2(ctx, both, env2, 100)
}

// joinAcc2 runs the setup that loads acc2 alone (wantRows rows), syncs
// until caught up, and compares acc and acc2 with their live views.
func (e *syncEnv) joinAcc2(ctx context.Context, cfg Config, env Env, wantRows int64) {
	e.t.Helper()
	res, err := SetupSync(ctx, cfg, env)
	if err != nil || fmt.Sprint(res.Joined) != "[public.acc2]" || res.Loaded != wantRows {
		e.t.Fatalf("setup: %+v, %v", res, err)
	}
	e.catchUp(ctx, cfg, env)
	e.sameAccOf("acc")
	e.sameAccOf("acc2")
}

// TestSyncTableRecreated: a published table dropped and created again
// under its name is another table. Created again and added back to the
// publication by hand, sync loads it afresh (its load was of another OID),
// the old table's rows gone. Dropped and
// created again out of the publication (DROP TABLE takes it out), setup
// adds it back and loads it afresh too. Each time both live views end
// equal to PostgreSQL.
func TestSyncTableRecreated(t *testing.T) {
	e := newSyncEnv(t)
	recreate := func(from, to int) {
		e.exec(`DROP TABLE acc2`, `CREATE TABLE acc2 (LIKE acc INCLUDING ALL)`,
			fmt.Sprintf(`INSERT INTO acc2 SELECT i, -i, 'new '||i, NULL FROM generate_series(%d, %d) i`, from, to))
	}
	e.exec(accTable("acc", 100), accTable("acc2", 100))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	both, env := e.loadConfig("acc", "acc2")
	if _, err := SetupSync(ctx, both, env); err != nil {
		t.Fatal(err)
	}
	e.catchUp(ctx, both, env)

	recreate(50, 150)
	e.exec(`ALTER PUBLICATION `+e.pub+` ADD TABLE acc2`, `UPDATE acc SET tag = 'meanwhile' WHERE id < 10`)
	res, err := Sync(ctx, both, env)
	if err != nil || len(res.Resynced) != 1 || res.Resynced[0].Table != "public.acc2" || res.Resynced[0].Rows != 101 ||
		!strings.Contains(res.Resynced[0].Why, "dropped and created again") {
		t.Errorf("sync of a table created again: %+v, %v", res, err)
	}
	e.catchUp(ctx, both, env)
	e.sameAccOf("acc")
	e.sameAccOf("acc2")

	recreate(120, 130)
	e.exec(`UPDATE acc SET tag = 'again' WHERE id < 20`)
	e.catchUp(ctx, both, env) // acc alone: acc2 left the publication with the drop
	e.joinAcc2(ctx, both, env, 11)
}

// chunksOf is how many chunk rows of table the load ledger holds; -1 when
// it cannot be read (no ledger yet). It does not fail the test: the kill
// goroutine of runSetupKilled calls it.
func (e *syncEnv) chunksOf(table string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n uint64
	if err := e.ch.conn.QueryRow(ctx, "SELECT count() FROM "+e.chDB+"._changesink_load WHERE kind = 'chunk' AND tbl = ?", table).Scan(&n); err != nil {
		return -1
	}
	return int(n)
}
