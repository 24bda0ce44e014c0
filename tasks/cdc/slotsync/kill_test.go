package slotsync

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/changesink/changesink/internal/testenv"
	"github.com/changesink/changesink/tasks/cdc/internal/testhook"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/target"
)

// The child of TestSyncExactlyOnceUnderKills: one cdc sync run, in a
// process of its own, that the test kills with SIGKILL at a random moment
// or that kills itself at a chosen step.
const (
	envSyncChild = "CDC_TEST_SYNC_CHILD" // the source DSN
	envSyncSlot  = "CDC_TEST_SYNC_SLOT"
	envSyncDB    = "CDC_TEST_SYNC_DB"     // the ClickHouse database
	envSyncDieAt = "CDC_TEST_SYNC_DIE_AT" // a hook at which the child kills itself
)

// syncChild runs Sync as the test asked; it exits 0 when the run ended by
// itself, 1 when it failed.
func syncChild() int {
	set, err := mapping.ParseSet("sync.yaml", []byte("defaults: {target: {database: "+os.Getenv(envSyncDB)+"}}\ntables:\n"+
		"  - source: {schema: public, table: acc}\n"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cfg := Config{Postgres: Postgres{DSN: os.Getenv(envSyncChild)}, Slot: os.Getenv(envSyncSlot), Publication: os.Getenv(envSyncSlot),
		Mappings: set, ClickHouse: target.ClickHouse{URL: os.Getenv("CHANGESINK_TEST_CLICKHOUSE"), Timeout: time.Minute},
		FlushChanges: 25, MaxDuration: 20 * time.Second}
	env := Env{Log: slog.New(slog.NewTextHandler(os.Stderr, nil)), Hooks: testhook.Hooks{LockTiming: testLockTiming}}
	die := func(context.Context) error {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	switch os.Getenv(envSyncDieAt) {
	case "locked":
		env.Hooks.Locked = die
	case "before the insert":
		env.Hooks.BeforeInsert = die
	case "after the insert":
		env.Hooks.AfterInsert = die
	case "before the confirm":
		env.Hooks.Recorded = die
	}
	if _, err := Sync(context.Background(), cfg, env); err != nil {
		fmt.Fprintln(os.Stderr, "sync:", err)
		return 1
	}
	return 0
}

// writer changes the source table in transactions until stop: inserts,
// updates, deletes and key changes of random rows, some transactions of
// many rows. It reports the transactions it committed.
func writer(t *testing.T, e *syncEnv, stop <-chan struct{}, done chan<- int) {
	writeTo(t, e, "acc", 1, stop, done)
}

// writeTo is writer on table (acc's columns), its random choices seeded
// by seed.
func writeTo(t *testing.T, e *syncEnv, table string, seed uint64, stop <-chan struct{}, done chan<- int) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		t.Error(err)
		done <- 0
		return
	}
	defer conn.Close(ctx)
	rnd := rand.New(rand.NewPCG(seed, 2))
	next, n := 1000, 0
	for {
		select {
		case <-stop:
			done <- n
			return
		default:
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Error(err)
			done <- n
			return
		}
		for range 1 + rnd.IntN(8) {
			id := 1 + rnd.IntN(next)
			var sql string
			switch rnd.IntN(10) {
			case 0, 1, 2:
				next++
				sql = fmt.Sprintf("INSERT INTO %s VALUES (%d, %d, 'new %d', NULL) ON CONFLICT (id) DO NOTHING", table, next, rnd.IntN(1000), next)
			case 3:
				sql = fmt.Sprintf("DELETE FROM %s WHERE id = %d", table, id)
			case 4:
				next++
				sql = fmt.Sprintf("UPDATE %s SET id = %d WHERE id = %d", table, next, id)
			case 5:
				sql = "UPDATE " + table + " SET v = v + 1 WHERE id % 97 = " + strconv.Itoa(rnd.IntN(97))
			default:
				sql = fmt.Sprintf("UPDATE %s SET v = v + 1, tag = 't%d' WHERE id = %d", table, rnd.IntN(100), id)
			}
			if _, err := tx.Exec(ctx, sql); err != nil {
				t.Errorf("%s: %v", sql, err)
				_ = tx.Rollback(ctx)
				done <- n
				return
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Error(err)
			done <- n
			return
		}
		n++
		time.Sleep(time.Duration(rnd.IntN(3)) * time.Millisecond)
	}
}

// TestSyncExactlyOnceUnderKills: while a writer changes the source, sync
// runs are killed (SIGKILL) at random moments and at each step a kill can
// matter (lock held, before and after an insert, after the sync ledger
// row and before the slot's confirm); then a run catches up, and every row
// of the live view equals its source row, none missing, none extra, and
// the sync ledger's positions only grow.
func TestSyncExactlyOnceUnderKills(t *testing.T) {
	e, cfg, env := accEnv(t, sharedPG(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	stop, done := make(chan struct{}), make(chan int, 1)
	go writer(t, e, stop, done)
	steps := []string{"locked", "before the insert", "after the insert", "before the confirm"}
	rnd := rand.New(rand.NewPCG(3, 4))
	var mu sync.Mutex
	outcomes := map[string]int{}
	var logs []string
	for i := range 16 {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envSyncChild+"="+e.dsn, envSyncSlot+"="+e.slot, envSyncDB+"="+e.chDB)
		how := "random"
		if i%2 == 1 {
			how = steps[(i/2)%len(steps)]
			cmd.Env = append(cmd.Env, envSyncDieAt+"="+how)
		}
		out := &testenv.LockedBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if how == "random" {
			time.AfterFunc(time.Duration(200+rnd.IntN(3000))*time.Millisecond, func() { _ = cmd.Process.Kill() })
		}
		err := cmd.Wait()
		logs = append(logs, fmt.Sprintf("run %d (%s): %s", i, how, out.String()))
		mu.Lock()
		switch {
		case err == nil:
			outcomes["ended by itself"]++
		case cmd.ProcessState != nil && cmd.ProcessState.ExitCode() == 1:
			t.Fatalf("run %d (%s) failed: %s", i, how, out.String())
		default:
			outcomes["killed "+how]++
		}
		mu.Unlock()
	}
	close(stop)
	txs := <-done
	t.Logf("%d writer transactions; runs: %v", txs, outcomes)
	e.catchUp(ctx, cfg, env)
	e.sameAcc()
	if t.Failed() {
		for _, l := range logs {
			t.Log(l)
		}
		t.Logf("ledger: %v", e.ch.query(`SELECT seq, through_lsn, transactions, changes, holder FROM `+e.chDB+`._changesink_sync ORDER BY seq`))
		t.Logf("target: %v; FINAL: %v; view: %v", e.ch.query(`SELECT count(), countIf(_cdc_deleted = 1), max(_cdc_lsn) FROM `+e.chDB+`.acc`),
			e.ch.query(`SELECT count(), countIf(_cdc_deleted = 1) FROM `+e.chDB+`.acc FINAL`),
			e.ch.query(`SELECT name, engine FROM system.tables WHERE database = ?`, e.chDB))
	}
	// The ledger: one row per sequence number, positions never going down.
	rows := e.ch.query(`SELECT seq, through_lsn FROM `+e.chDB+`._changesink_sync WHERE slot = ? ORDER BY seq, through_lsn`, e.slot)
	var prevSeq, prevLSN uint64
	for _, r := range rows {
		var seq, lsn uint64
		if _, err := fmt.Sscanf(r, "%d\t%d", &seq, &lsn); err != nil {
			t.Fatal(err)
		}
		if seq != prevSeq+1 || lsn < prevLSN {
			t.Errorf("sync ledger row %q after seq %d at %d", r, prevSeq, prevLSN)
		}
		prevSeq, prevLSN = seq, lsn
	}
}
