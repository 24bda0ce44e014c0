package slotsync

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/changesink/changesink/internal/testenv"
	"github.com/changesink/changesink/tasks/cdc/internal/testhook"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/target"
)

// envLoadChild asks TestMain for the child of
// TestSyncLoadContinuesAfterKills: one cdc setup of table acc (the source
// DSN in it, the slot and the ClickHouse database in envSyncSlot and
// envSyncDB), in small chunks and blocks with two workers.
const envLoadChild = "CDC_TEST_LOAD_CHILD"

// envLoadTables names the child's tables (comma-separated; acc when
// unset).
const envLoadTables = "CDC_TEST_LOAD_TABLES"

// envLoadResync names the tables the child resyncs (Config.Resync).
const envLoadResync = "CDC_TEST_LOAD_RESYNC"

// loadConfig is the setup of the load kill tests, in the child and in the
// test: the tables (in schema public) into database db.
func loadConfig(dsn, slot, db string, tables ...string) (Config, Env, error) {
	if len(tables) == 0 {
		tables = []string{"acc"}
	}
	yaml := "defaults: {target: {database: " + db + "}}\ntables:\n"
	for _, t := range tables {
		yaml += "  - source: {schema: public, table: " + t + "}\n"
	}
	set, err := mapping.ParseSet("sync.yaml", []byte(yaml))
	cfg := Config{Postgres: Postgres{DSN: dsn}, Slot: slot, Publication: slot, Mappings: set, LoadWorkers: 2,
		ClickHouse: target.ClickHouse{URL: os.Getenv("CHANGESINK_TEST_CLICKHOUSE"), Timeout: time.Minute}}
	env := Env{Log: slog.New(slog.NewTextHandler(os.Stderr, nil)),
		Hooks: testhook.Hooks{LockTiming: testLockTiming, LoadChunkRows: 500, LoadBlockRows: 200}}
	return cfg, env, err
}

func loadChild() int {
	var tables []string
	if v := os.Getenv(envLoadTables); v != "" {
		tables = strings.Split(v, ",")
	}
	cfg, env, err := loadConfig(os.Getenv(envLoadChild), os.Getenv(envSyncSlot), os.Getenv(envSyncDB), tables...)
	if v := os.Getenv(envLoadResync); v != "" {
		cfg.Resync = strings.Split(v, ",")
	}
	if err == nil {
		_, err = SetupSync(context.Background(), cfg, env)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "setup:", err)
		return 1
	}
	return 0
}

// loadingRE is the start of a load.
var loadingRE = regexp.MustCompile(`cdc: loading `)

// runSetupKilled runs cdc setup in a child (TestMain's load child, the
// test's source, slot and database, extra variables added) and kills it
// (SIGKILL) delay after started first holds of its log. It returns the
// child's log and whether it finished before the kill; a run that failed
// (exit 1) fails the test.
func runSetupKilled(ctx context.Context, t *testing.T, e *syncEnv, started func(log string) bool, delay time.Duration, extra ...string) (string, bool) {
	t.Helper()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), envLoadChild+"="+e.dsn, envSyncSlot+"="+e.slot, envSyncDB+"="+e.chDB), extra...)
	out := &testenv.LockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { // kill it at a random moment of its load
		for !started(out.String()) {
			select {
			case <-exited:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
		time.Sleep(delay)
		_ = cmd.Process.Kill()
	}()
	err := cmd.Wait()
	close(exited)
	if err != nil && cmd.ProcessState != nil && cmd.ProcessState.ExitCode() == 1 {
		t.Fatalf("cdc setup failed: %s", out.String())
	}
	return out.String(), err == nil
}

// continuedRE reads how many chunks a continued load found done.
var continuedRE = regexp.MustCompile(`continuing the load of slot \S+ \(generation \d+, (\d+) chunks done\)`)

// TestSyncLoadContinuesAfterKills: while a writer changes the source,
// cdc setup runs are killed (SIGKILL) at random moments of their load;
// each next run continues the load from a new snapshot without the chunks
// done; then sync catches up, and every row of the live view equals its
// source row, none missing, none extra.
func TestSyncLoadContinuesAfterKills(t *testing.T) {
	e := newSyncEnv(t)
	e.tables = []string{"public.acc"}
	e.exec(`CREATE TABLE acc (id bigint PRIMARY KEY, v bigint NOT NULL, tag text, blob text)`,
		`ALTER TABLE acc ALTER COLUMN blob SET STORAGE EXTERNAL`,
		// The writer changes ids from 1 up (and every 97th row); the rest
		// of the rows are read as they were, or as those updates moved them.
		`INSERT INTO acc SELECT i, i, 'tag '||i, CASE WHEN i % 500 = 0 THEN repeat(md5(i::text), 100) END FROM generate_series(-39000, 1000) i WHERE i <> 0`,
		`ANALYZE acc`)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	stop, done := make(chan struct{}), make(chan int, 1)
	go writer(t, e, stop, done)
	rnd := rand.New(rand.NewPCG(5, 6))
	var logs []string
	finished, killed, resumedWithDone := false, 0, 0
	for i := 0; i < 8 && !finished; i++ {
		var out string
		out, finished = runSetupKilled(ctx, t, e, loadingRE.MatchString, time.Duration(rnd.IntN(1500))*time.Millisecond)
		logs = append(logs, fmt.Sprintf("run %d: %s", i, out))
		if !finished {
			killed++
		}
		if m := continuedRE.FindStringSubmatch(out); m != nil {
			if n, _ := strconv.Atoi(m[1]); n > 0 {
				resumedWithDone++
			}
		}
	}
	cfg, env, err := loadConfig(e.dsn, e.slot, e.chDB)
	if err != nil {
		t.Fatal(err)
	}
	env.Log = slog.New(slog.DiscardHandler)
	if !finished {
		if _, err := SetupSync(ctx, cfg, env); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	txs := <-done
	t.Logf("%d writer transactions; %d setup runs killed during the load, %d continued a load with chunks done", txs, killed, resumedWithDone)
	e.catchUp(ctx, cfg, env)
	e.sameAcc()
	points := e.ch.query(`SELECT DISTINCT point FROM ` + e.chDB + `._changesink_load WHERE kind = 'chunk'`)
	if killed == 0 || resumedWithDone == 0 || len(points) < 2 {
		t.Errorf("%d runs killed, %d continued with chunks done, chunks at %d points: the test did not test a continued load", killed, resumedWithDone, len(points))
	}
	if t.Failed() {
		for _, l := range logs {
			t.Log(l)
		}
	}
}
