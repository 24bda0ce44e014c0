package cdc

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/target"
)

// quorumRows is the target as changesink reads it through replica i: the
// winning rows, with sequential consistency (only parts every replica
// acknowledged), in key order; err when the replica refuses the read.
func (c *clusterEnv) quorumRows(i int) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ctx = clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"select_sequential_consistency": 1}))
	rows, err := c.conns[i].Query(ctx, "SELECT id, status, _cdc_lsn FROM "+c.db+".orders_cdc FINAL ORDER BY id")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id int64
		var status string
		var lsn uint64
		if err := rows.Scan(&id, &status, &lsn); err != nil {
			return nil, err
		}
		out = append(out, orderLine(id, 0, 0, status, int64(lsn), false))
	}
	return out, rows.Err()
}

// TestClusterFaultsMidApply: a batch applied through r1 meets a fault
// after it took the lock and read the target, before its insert (or after
// it): r2 killed, r2 frozen, r2 lagging (its fetches stopped), ZooKeeper
// frozen or killed. The run fails transient (exit 3) and, with r2 lagging,
// its rows are on no replica as changesink reads them; once the fault is
// repaired, the same batch through r2 converges, and both replicas hold
// the expected rows and the same ledger.
func TestClusterFaultsMidApply(t *testing.T) {
	tests := []struct {
		name   string
		at     string                                   // the hook the fault happens at
		fault  func(c *clusterEnv, ctx context.Context) // done at the hook
		repair func(c *clusterEnv)
	}{
		{"replica killed", "before the insert", func(c *clusterEnv, _ context.Context) { c.cl.Ctl("kill", "r2") }, nil},
		{"replica frozen", "before the insert", func(c *clusterEnv, _ context.Context) { c.cl.Ctl("pause", "r2") }, nil},
		{"replica lagging", "before the insert", func(c *clusterEnv, ctx context.Context) {
			c.exec(ctx, 1, "SYSTEM STOP FETCHES "+c.db+".orders_cdc")
		}, func(c *clusterEnv) { c.exec(context.Background(), 1, "SYSTEM START FETCHES "+c.db+".orders_cdc") }},
		{"ZooKeeper frozen", "before the insert", func(c *clusterEnv, _ context.Context) { c.cl.Ctl("pause", "zookeeper") }, nil},
		{"ZooKeeper killed after the insert", "after the insert", func(c *clusterEnv, _ context.Context) { c.cl.Ctl("kill", "zookeeper") }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClusterEnv(t)
			c.setup()
			first := writeFile(t, "1.ion", encode(t, false,
				orderEvent(1, int64(10), int64(500), "new", int64(100), false), orderEvent(2, int64(20), int64(700), "new", int64(101), false)))
			if _, err := testApply(context.Background(), c.via(0, first)); err != nil {
				t.Fatalf("the batch before the fault: %v", err)
			}
			second := writeFile(t, "2.ion", encode(t, true,
				orderEvent(1, int64(10), int64(550), "paid", int64(200), false), orderEvent(3, int64(30), int64(900), "new", int64(201), false)))
			cfg := c.via(0, second)
			cfg.ClickHouse.Timeout = 8 * time.Second
			setHook(t, &cfg, tt.at, func(ctx context.Context) error {
				tt.fault(c, ctx)
				return nil
			})
			start := time.Now()
			_, err := testApply(context.Background(), cfg)
			t.Logf("the run with the fault ended after %s: %v", time.Since(start).Round(100*time.Millisecond), err)
			if err == nil || outcome.Classify(err) != outcome.Transient {
				t.Fatalf("the run with the fault: %v, want a transient failure (exit 3)", err)
			}
			// The lock's heartbeat (a quorum insert too) may wait on the
			// same replica and end the run first, as the lock lost.
			if !errors.Is(err, target.ErrReplicaUnavailable) && !errors.Is(err, target.ErrUnreachable) && !errors.Is(err, target.ErrClusterLocked) {
				t.Errorf("the run with the fault: %v, want ErrReplicaUnavailable, ErrUnreachable or ErrClusterLocked", err)
			}
			if tt.name == "replica lagging" {
				// The insert reached r1 only: changesink's reads (sequential
				// consistency) show it on neither replica.
				want := []string{orderLine(1, 0, 0, "new", 100, false), orderLine(2, 0, 0, "new", 101, false)}
				for i := range c.conns {
					got, err := c.quorumRows(i)
					if err != nil || len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
						t.Errorf("replica r%d, as changesink reads it: %v, %v; want %v", i+1, got, err, want)
					}
				}
			}
			if tt.repair != nil {
				tt.repair(c)
			}
			c.cl.Repair()
			res, err := testApply(context.Background(), c.via(1, second))
			if err != nil {
				t.Fatalf("the re-run through r2: %v", err)
			}
			if res.Verified != 2 {
				t.Errorf("the re-run: %v", res.Outputs())
			}
			c.sameOnEveryReplica([]string{
				orderLine(1, 10, 550, "paid", 200, false),
				orderLine(2, 20, 700, "new", 101, false),
				orderLine(3, 30, 900, "new", 201, false),
			})
			for i := range c.conns {
				if got := c.onReplica(i, "SELECT seq, kind, events FROM "+c.db+".orders_cdc_ledger ORDER BY seq"); len(got) != 2 {
					t.Errorf("replica r%d ledger: %v, want 2 batch rows", i+1, got)
				}
			}
		})
	}
}

// exec runs sql on replica i or fails the test.
func (c *clusterEnv) exec(ctx context.Context, i int, sql string) {
	c.t.Helper()
	if err := c.conns[i].Exec(ctx, sql); err != nil {
		c.t.Fatalf("replica r%d: %s: %v", i+1, sql, err)
	}
}

// TestClusterLaggingReplicaIsReal: the lag the fault test makes is real:
// a plain insert through r1 (no quorum, as a client without changesink's
// settings writes) while r2 does not fetch is on r1 and not on r2, so a
// read from r2 would miss it; changesink's quorum insert is never
// acknowledged meanwhile.
func TestClusterLaggingReplicaIsReal(t *testing.T) {
	c := newClusterEnv(t)
	c.setup()
	ctx := context.Background()
	c.exec(ctx, 1, "SYSTEM STOP FETCHES "+c.db+".orders_cdc")
	c.exec(ctx, 0, "INSERT INTO "+c.db+".orders_cdc SELECT 1, 10, 500, 'plain', 100, 0")
	time.Sleep(time.Second)
	if got := c.onReplica(0, "SELECT count() FROM "+c.db+".orders_cdc"); got[0] != "1" {
		t.Errorf("r1 holds %s rows, want 1", got[0])
	}
	if got := c.onReplica(1, "SELECT count() FROM "+c.db+".orders_cdc"); got[0] != "0" {
		t.Errorf("r2, not fetching, holds %s rows, want 0 (a read from it would miss the insert)", got[0])
	}
	qctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	qctx = clickhouse.Context(qctx, clickhouse.WithSettings(clickhouse.Settings{"insert_quorum": 2, "insert_quorum_timeout": 2000}))
	err := c.conns[0].Exec(qctx, "INSERT INTO "+c.db+".orders_cdc SELECT 2, 20, 700, 'quorum', 101, 0")
	if err == nil {
		t.Errorf("a quorum insert was acknowledged while r2 does not fetch")
	}
	c.exec(ctx, 1, "SYSTEM START FETCHES "+c.db+".orders_cdc")
}

// TestClusterReplicaDownBeforeTheRun: with r2 down (its ZooKeeper session
// gone), apply and setup through r1 fail at once, transient, naming the
// replica that is away (both connect to every replica first), instead of
// waiting for it until the call timeout; once r2 is back, the batch
// applies.
func TestClusterReplicaDownBeforeTheRun(t *testing.T) {
	c := newClusterEnv(t)
	c.setup()
	c.cl.Ctl("kill", "r2")
	deadline := time.Now().Add(time.Minute)
	for c.onReplica(0, "SELECT active_replicas FROM system.replicas WHERE database = ? AND table = 'orders_cdc'", c.db)[0] != "1" {
		if time.Now().After(deadline) {
			t.Fatal("r1 still sees r2 active a minute after it was killed")
		}
		time.Sleep(200 * time.Millisecond)
	}
	batch := writeFile(t, "1.ion", encode(t, false, orderEvent(1, int64(10), int64(500), "new", int64(100), false)))
	for _, run := range []struct {
		name string
		do   func() error
		says string
	}{
		{"apply", func() error { _, err := testApply(context.Background(), c.via(0, batch)); return err }, "127.0.0.1:19102"},
		{"setup", func() error { _, err := testSetup(context.Background(), c.via(0, "")); return err }, "127.0.0.1:19102"},
	} {
		start := time.Now()
		err := run.do()
		took := time.Since(start)
		wantError(t, err, outcome.Transient, target.ErrReplicaUnavailable, run.says)
		if took > 15*time.Second {
			t.Errorf("%s took %s to fail, want it at once", run.name, took.Round(100*time.Millisecond))
		}
		t.Logf("%s failed in %s: %v", run.name, took.Round(10*time.Millisecond), err)
	}
	c.cl.Repair()
	if res, err := testApply(context.Background(), c.via(0, batch)); err != nil || res.Pending != 1 {
		t.Fatalf("the run once r2 is back: %v, %v", res, err)
	}
	c.sameOnEveryReplica([]string{orderLine(1, 10, 500, "new", 100, false)})
}

// TestClusterLedgerRowLandsLate: a run's ledger row fails its quorum (r2
// not fetching the ledger: UNKNOWN_STATUS_OF_INSERT) and stays on r1,
// invisible to changesink's reads. The re-run reads the ledger without it
// and waits to record its own row while that quorum is open; r2 fetches
// meanwhile, the first row lands, and the re-run finds it instead of
// writing a second row of the same seq: the ledger holds each batch once.
func TestClusterLedgerRowLandsLate(t *testing.T) {
	c := newClusterEnv(t)
	c.setup()
	ledger := c.db + ".orders_cdc_ledger"
	first := writeFile(t, "1.ion", encode(t, false, orderEvent(1, int64(10), int64(500), "new", int64(100), false)))
	if _, err := testApply(context.Background(), c.via(0, first)); err != nil {
		t.Fatal(err)
	}
	second := writeFile(t, "2.ion", encode(t, true, orderEvent(2, int64(20), int64(700), "new", int64(200), false)))
	cfg := c.via(0, second)
	cfg.ClickHouse.Timeout = 6 * time.Second
	setHook(t, &cfg, "after the insert", func(ctx context.Context) error {
		c.exec(ctx, 1, "SYSTEM STOP FETCHES "+ledger)
		return nil
	})
	_, err := testApply(context.Background(), cfg)
	if err == nil || outcome.Classify(err) != outcome.Transient {
		t.Fatalf("the run whose ledger row cannot reach r2: %v, want transient", err)
	}
	t.Logf("the first run: %v", err)
	if got := c.onReplica(0, "SELECT count() FROM "+ledger); got[0] != "2" {
		t.Fatalf("r1 holds %s ledger rows, want 2 (the second unacknowledged)", got[0])
	}
	again := c.via(0, second)
	setHook(t, &again, "after the insert", func(ctx context.Context) error {
		go func() {
			time.Sleep(time.Second) // the run is waiting on the open quorum by then
			c.exec(context.Background(), 1, "SYSTEM START FETCHES "+ledger)
		}()
		return nil
	})
	if _, err := testApply(context.Background(), again); err != nil {
		t.Fatalf("the re-run: %v", err)
	}
	for i := range c.conns {
		c.exec(context.Background(), i, "SYSTEM SYNC REPLICA "+ledger)
		got := c.onReplica(i, "SELECT seq, count() FROM "+ledger+" GROUP BY seq ORDER BY seq")
		if len(got) != 2 || got[0] != "1\t1" || got[1] != "2\t1" {
			t.Errorf("replica r%d ledger rows per seq: %v, want one row of seq 1 and one of seq 2", i+1, got)
		}
	}
	c.sameOnEveryReplica([]string{orderLine(1, 10, 500, "new", 100, false), orderLine(2, 20, 700, "new", 200, false)})
}
