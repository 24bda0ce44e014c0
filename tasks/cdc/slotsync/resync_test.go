package slotsync

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
)

// TestSyncResyncOneTable: an operator's resync (CDC_RESYNC) reloads one
// table from a new snapshot while a writer changes both tables; the other
// table is not loaded again; both end equal to their sources, and the
// resynced target holds no key its source lacks (rows deleted behind the
// stream's back in the target are right again after the resync).
//
//changesink:per-server
func TestSyncResyncOneTable(t *testing.T) {
	e := newSyncEnv(t)
	e.tables = []string{"public.acc", "public.acc2"}
	e.exec(accTable("acc", 2000), accTable("acc2", 500))
	cfg, env := e.config()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := SetupSync(ctx, cfg, env); err != nil {
		t.Fatal(err)
	}
	// The target changed behind the stream's back: a key the source never
	// had, live, and ten keys gone. It is wrong until a resync.
	e.ch.exec(`INSERT INTO `+e.chDB+`.acc (id, v, _cdc_lsn, _cdc_deleted) SELECT 99999, 1, 1, 0`,
		`ALTER TABLE `+e.chDB+`.acc DELETE WHERE id <= 10`)
	e.ch.waitMutations("acc")
	e.exec(`UPDATE acc SET v = v + 1 WHERE id = 100`, `UPDATE acc2 SET v = v + 1 WHERE id = 100`)
	if _, err := Sync(ctx, cfg, env); err != nil {
		t.Fatal(err)
	}
	cfg.Resync = []string{"public.acc"}
	res, err := SetupSync(ctx, cfg, env)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Resynced) != 1 || res.Resynced[0].Table != "public.acc" {
		t.Errorf("resynced %+v, want public.acc", res.Resynced)
	}
	cfg.Resync = nil
	if _, err := Sync(ctx, cfg, env); err != nil {
		t.Fatal(err)
	}
	for _, tbl := range []string{"acc", "acc2"} {
		e.same(fmt.Sprintf(`SELECT id::text, v::text FROM %[1]s ORDER BY %[1]s.id`, tbl),
			fmt.Sprintf(`SELECT id, v FROM %s.%s_live ORDER BY id`, e.chDB, tbl))
	}
	// acc2 was loaded once: by the slot's own load.
	if got := e.ch.query(`SELECT count() FROM ` + e.chDB + `._changesink_load WHERE kind = 'start' AND tbl = 'public.acc2'`); strings.Join(got, "") != "0" {
		t.Errorf("acc2 was loaded again: %v", got)
	}
}

// TestSetupReloadsALostTarget: a target dropped by hand (with its ledger
// and live view, as a rebuild would), or emptied by hand (TRUNCATE), is
// loaded again by the next cdc setup, not made again empty; sync then
// streams on.
func TestSetupReloadsALostTarget(t *testing.T) {
	for _, lose := range []string{"drop", "truncate"} {
		t.Run(lose, func(t *testing.T) {
			e, cfg, env, ctx := setUpSync(t, "public.acc", accTable("acc", 1000))
			e.exec(`UPDATE acc SET v = v + 1 WHERE id <= 5`)
			if _, err := Sync(ctx, cfg, env); err != nil {
				t.Fatal(err)
			}
			switch lose {
			case "drop":
				e.ch.exec(`DROP TABLE `+e.chDB+`.acc_live`, `DROP TABLE `+e.chDB+`.acc_ledger`, `DROP TABLE `+e.chDB+`.acc`)
			case "truncate":
				e.ch.exec(`TRUNCATE TABLE ` + e.chDB + `.acc`)
			}
			e.exec(`UPDATE acc SET v = v + 1 WHERE id <= 10`)
			e.flowRound(ctx, cfg, env)
			e.same(`SELECT id::text, v::text FROM acc ORDER BY acc.id`, `SELECT id, v FROM `+e.chDB+`.acc_live ORDER BY id`)
		})
	}
}

// TestSyncHoldsARefusedTable: a value one table's mapping cannot hold
// holds that table (quarantine), not the slot: the other table's changes
// are applied and confirmed, the run fails naming the table, the LSN and
// the value, every later run skips the held table and fails the same way;
// once the mapping is fixed, the operator's resync reloads it and it
// streams on, both tables equal to their sources.
func TestSyncHoldsARefusedTable(t *testing.T) {
	e := newSyncEnv(t)
	e.tables = []string{"public.acc", "public.small"}
	e.exec(accTable("acc", 100), `CREATE TABLE small (id int PRIMARY KEY, n int)`, `INSERT INTO small VALUES (1, 1)`)
	narrow := "  - source: {database: %s, schema: public, table: small}\n    columns: [{name: n, type: Nullable(Int8)}]\n"
	cfg, env := e.configYAML(fmt.Sprintf(narrow, e.slot))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := SetupSync(ctx, cfg, env); err != nil {
		t.Fatal(err)
	}
	e.exec(`UPDATE acc SET v = v + 1 WHERE id = 1`, `INSERT INTO small VALUES (2, 1000)`, `UPDATE acc SET v = v + 1 WHERE id = 2`,
		`INSERT INTO small VALUES (3, 3)`)
	for run := range 2 {
		res, err := Sync(ctx, cfg, env)
		wantError(t, err, outcome.Refused, change.ErrHeld, "public.small")
		if run == 0 && !strings.Contains(err.Error(), "1000") {
			t.Errorf("the first run's error does not name the value: %v", err)
		}
		if res == nil || len(res.Held) != 1 || res.Held[0].Table != "public.small" {
			t.Errorf("run %d: held %+v, want public.small", run, res)
		}
		e.same(`SELECT id::text, v::text FROM acc ORDER BY acc.id`, `SELECT id, v FROM `+e.chDB+`.acc_live ORDER BY id`)
	}
	if got := e.ch.query(`SELECT id FROM ` + e.chDB + `.small_live ORDER BY id`); strings.Join(got, ",") != "1" {
		t.Errorf("small holds %v, want only 1: a held table takes no change", got)
	}
	cfg, env = e.configYAML(fmt.Sprintf(strings.Replace(narrow, "Int8", "Int32", 1), e.slot))
	cfg.Resync = []string{"public.small"}
	e.flowRound(ctx, cfg, env)
	cfg.Resync = nil
	e.exec(`INSERT INTO small VALUES (4, 4)`)
	e.flowRound(ctx, cfg, env)
	e.same(`SELECT id::text, n::text FROM small ORDER BY small.id`, `SELECT id, n FROM `+e.chDB+`.small_live ORDER BY id`)
	e.same(`SELECT id::text, v::text FROM acc ORDER BY acc.id`, `SELECT id, v FROM `+e.chDB+`.acc_live ORDER BY id`)
}

// TestSyncSchemaChangesRefused: under schema_changes: refuse, a schema
// change holds its table at the change: the transactions before it are
// applied, nothing of it or after it; the other table streams on.
func TestSyncSchemaChangesRefused(t *testing.T) {
	e := newSyncEnv(t)
	e.tables = []string{"public.acc", "public.r"}
	e.exec(accTable("acc", 100), `CREATE TABLE r (id int PRIMARY KEY, n int)`, `INSERT INTO r VALUES (1, 1)`)
	cfg, env := e.configYAML(fmt.Sprintf("  - source: {database: %s, schema: public, table: r}\n    schema_changes: refuse\n", e.slot))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := SetupSync(ctx, cfg, env); err != nil {
		t.Fatal(err)
	}
	e.exec(`INSERT INTO r VALUES (2, 2)`, `ALTER TABLE r ADD COLUMN e int`, `INSERT INTO r VALUES (3, 3, 3)`, `UPDATE acc SET v = 7 WHERE id = 1`)
	_, err := Sync(ctx, cfg, env)
	wantError(t, err, outcome.Refused, change.ErrSchemaChange, "public.r", "added e")
	if got := e.ch.query(`SELECT id FROM ` + e.chDB + `.r_live ORDER BY id`); strings.Join(got, ",") != "1,2" {
		t.Errorf("r holds %v, want 1,2: the transaction before the change, nothing after", got)
	}
	e.same(`SELECT id::text, v::text FROM acc ORDER BY acc.id`, `SELECT id, v FROM `+e.chDB+`.acc_live ORDER BY id`)
}

// TestSyncSkipsATableThatLeftThePublication: a table added to the
// publication by hand, changed, and removed again: its changes in the
// slot are skipped (it is not published now), the others applied, and
// sync does not end at it run after run.
func TestSyncSkipsATableThatLeftThePublication(t *testing.T) {
	e, cfg, env, ctx := setUpSync(t, "public.acc", accTable("acc", 10))
	e.exec(`CREATE TABLE x (id int PRIMARY KEY)`, `ALTER PUBLICATION `+e.pub+` ADD TABLE x`, `INSERT INTO x VALUES (1)`,
		`ALTER PUBLICATION `+e.pub+` DROP TABLE x`, `UPDATE acc SET v = 5 WHERE id = 1`)
	for range 2 {
		res, err := Sync(ctx, cfg, env)
		if err != nil {
			t.Fatal(err)
		}
		if res.Why != whyCaughtUp {
			t.Errorf("sync ended %q, want caught up", res.Why)
		}
	}
	e.same(`SELECT id::text, v::text FROM acc ORDER BY acc.id`, `SELECT id, v FROM `+e.chDB+`.acc_live ORDER BY id`)
}

// TestSyncTableWithoutPrimaryKey: a table with no primary key under
// REPLICA IDENTITY FULL is refused with a message that says so and what
// to do (name a key in its mapping entry), and streams once the entry
// names one.
func TestSyncTableWithoutPrimaryKey(t *testing.T) {
	e := newSyncEnv(t)
	e.tables = []string{"public.nk"}
	e.exec(`CREATE TABLE nk (code text NOT NULL, v int)`, `ALTER TABLE nk REPLICA IDENTITY FULL`, `INSERT INTO nk VALUES ('a', 1)`)
	cfg, env := e.config()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, err := SetupSync(ctx, cfg, env)
	wantError(t, err, outcome.Config, mapping.ErrNoKey, "public.nk", "no primary key", "key:")
	cfg, env = e.configYAML(fmt.Sprintf("  - source: {database: %s, schema: public, table: nk}\n    key: [code]\n", e.slot))
	e.flowRound(ctx, cfg, env)
	e.exec(`UPDATE nk SET v = 2 WHERE code = 'a'`, `INSERT INTO nk VALUES ('b', 3)`, `DELETE FROM nk WHERE code = 'a'`)
	e.flowRound(ctx, cfg, env)
	e.same(`SELECT code, v::text FROM nk ORDER BY nk.code`, `SELECT code, v FROM `+e.chDB+`.nk_live ORDER BY code`)
}

// resyncRE is the start of a resync's load of acc.
var resyncRE = regexp.MustCompile(`cdc: (loading|continuing the load \(generation \d+, (\d+) chunks done\) of) public\.acc, again`)

// TestSyncResyncUnderKills: while writers change acc and acc2, an
// operator's resync of acc (cdc setup with CDC_RESYNC) is killed (SIGKILL)
// at random moments of its load, sync running between the kills; a
// resync killed is continued or begun again by the next run. Then every
// row of both live views equals its source row, acc2 was never loaded
// again, and no table built beside acc is left.
func TestSyncResyncUnderKills(t *testing.T) {
	e := newSyncEnv(t)
	e.exec(`CREATE TABLE acc (id bigint PRIMARY KEY, v bigint NOT NULL, tag text, blob text)`,
		`ALTER TABLE acc ALTER COLUMN blob SET STORAGE EXTERNAL`,
		`INSERT INTO acc SELECT i, i, 'tag '||i, CASE WHEN i % 500 = 0 THEN repeat(md5(i::text), 100) END FROM generate_series(-30000, 1000) i WHERE i <> 0`,
		`ANALYZE acc`, accTable("acc2", 1000))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	both, env := e.loadConfig("acc", "acc2")
	if _, err := SetupSync(ctx, both, env); err != nil {
		t.Fatal(err)
	}
	stop, done := make(chan struct{}), make(chan int, 2)
	go writeTo(t, e, "acc", 3, stop, done)
	go writeTo(t, e, "acc2", 4, stop, done)
	rnd := rand.New(rand.NewPCG(10, 11))
	var logs []string
	finished, killed, continued := false, 0, 0
	for i := 0; i < 5 && !finished; i++ {
		var out string
		out, finished = runSetupKilled(ctx, t, e, resyncRE.MatchString, time.Duration(rnd.IntN(1500))*time.Millisecond, envLoadTables+"=acc,acc2",
			envLoadResync+"=public.acc")
		logs = append(logs, fmt.Sprintf("run %d: %s", i, out))
		if !finished {
			killed++
		}
		if m := resyncRE.FindStringSubmatch(out); m != nil && m[2] != "" {
			if n, _ := strconv.Atoi(m[2]); n > 0 {
				continued++
			}
		}
		if i%2 == 1 {
			// Sync between the kills: it ends the resync a killed run left.
			if _, err := Sync(ctx, both, env); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(stop)
	txs := <-done + <-done
	t.Logf("%d writer transactions; %d resync runs killed, %d continued with chunks done", txs, killed, continued)
	e.catchUp(ctx, both, env)
	e.sameAccOf("acc")
	e.sameAccOf("acc2")
	if got := e.ch.query(`SELECT count() FROM ` + e.chDB + `._changesink_load WHERE kind IN ('start', 'chunk') AND tbl = 'public.acc2'`); len(got) != 1 || got[0] == "0" {
		t.Errorf("acc2's load ledger rows: %v", got)
	}
	if got := e.ch.query(`SELECT count() FROM ` + e.chDB + `._changesink_load WHERE kind = 'start' AND tbl = 'public.acc2'`); strings.Join(got, "") != "0" {
		t.Errorf("acc2 was loaded again: %v start rows of its own", got)
	}
	if got := e.ch.query(`SELECT name FROM system.tables WHERE database = '` + e.chDB + `' AND name LIKE 'acc\\_\\_rs%'`); len(got) != 0 {
		t.Errorf("tables left beside acc: %v", got)
	}
	if killed == 0 {
		t.Error("no resync was killed: the test did not test a killed resync")
	}
	if t.Failed() {
		for _, l := range logs {
			t.Log(l)
		}
	}
}

// TestSyncSchemaChangesUnderAnEntry: a table whose mapping entry names
// its columns, as the shipped flows' mappings do. A column the entry
// names, dropped at the source, is followed (kept, NULL from the drop on)
// by sync and by every setup after it, with a warning to remove it from
// the entry; a new target whose entry names a column the table lacks is
// refused at the entry's line. A column the entry maps as Int64 retyped to
// text, a rewrite the stream cannot show, holds the table: the
// transactions before it applied, nothing after, every run refused alike
// (it was a configuration error of the resync's load, which wedged the
// flow with the update before the change not applied).
//
//changesink:per-server
func TestSyncSchemaChangesUnderAnEntry(t *testing.T) {
	e := newSyncEnv(t)
	e.tables = []string{"public.o"}
	e.exec(`CREATE TABLE o (id int PRIMARY KEY, customer_id bigint NOT NULL, amount bigint NOT NULL, status text)`,
		`INSERT INTO o SELECT i, i % 3, i * 10, 'new' FROM generate_series(1, 20) i`)
	entry := "  - source: {database: %s, schema: public, table: o}\n" +
		"    columns: [{name: customer_id, type: Int64}, {name: amount, type: Int64}, {name: status, type: Nullable(String)}]\n"
	cfg, env := e.configYAML(fmt.Sprintf(entry, e.slot))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	e.flowRound(ctx, cfg, env)

	e.exec(`UPDATE o SET customer_id = 9 WHERE id = 1`, `ALTER TABLE o DROP COLUMN customer_id`, `UPDATE o SET status = 'paid' WHERE id <= 3`)
	for run := range 2 {
		res := e.flowRound(ctx, cfg, env)
		e.same(`SELECT id::text, amount::text, status FROM o ORDER BY o.id`, `SELECT id, amount, status FROM `+e.chDB+`.o_live ORDER BY id`)
		switch {
		case run == 0 && (len(res.SchemaChanges) != 1 || !strings.Contains(res.SchemaChanges[0], "dropped customer_id")):
			t.Errorf("run 0 followed %q, want the drop of customer_id once", res.SchemaChanges)
		case run == 1 && len(res.SchemaChanges) != 0:
			t.Errorf("run 1 followed %q, want nothing: the drop was followed once", res.SchemaChanges)
		}
	}
	if got := e.ch.query(`SELECT id, customer_id FROM ` + e.chDB + `.o_live WHERE id IN (1, 4) ORDER BY id`); strings.Join(got, ",") != "1\tNULL,4\t1" {
		t.Errorf("the dropped column holds %v, want NULL in a row changed after the drop, its value before in one that was not (1 NULL, 4 1)", got)
	}

	other := e.slot + "_new"
	newEntry := strings.Replace(entry, "table: o}", "table: o}\n    target: {table: o_new}", 1)
	ncfg, nenv := e.configYAML(fmt.Sprintf(newEntry, e.slot))
	ncfg.Slot, ncfg.Publication = other, other
	t.Cleanup(func() {
		e.exec(`SELECT pg_drop_replication_slot('` + other + `') FROM pg_replication_slots WHERE slot_name = '` + other + `'`)
	})
	_, err := SetupSync(ctx, ncfg, nenv)
	wantError(t, err, outcome.Config, mapping.ErrMapping, "customer_id", "not a column of public.o")

	e.exec(`UPDATE o SET status = 'sent' WHERE id = 4`)
	want := e.rows(`SELECT id::text, amount::text, status FROM o ORDER BY o.id`)
	e.exec(`ALTER TABLE o ALTER COLUMN amount TYPE text`, `INSERT INTO o VALUES (21, 'n/a', 'new')`)
	for run := range 2 {
		res, err := Sync(ctx, cfg, env)
		wantError(t, err, outcome.Refused, change.ErrHeld, "public.o", "amount")
		if res == nil || len(res.Held) != 1 {
			t.Errorf("run %d: held %+v, want public.o", run, res)
		}
		got := e.ch.query(`SELECT id, amount, status FROM ` + e.chDB + `.o_live ORDER BY id`)
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("run %d: o_live holds\n%s\nwant the update before the retype and nothing after:\n%s", run,
				strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}
