package cdc

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/target"
)

// The tests of a replica that lacks, or holds another, object of the
// target than the others (issue 38's findings 1, 2 and 4): apply refuses
// before it takes the lock, naming the replica and the difference (exit
// 2, hint: cdc setup); the repair the hint names makes the cluster whole,
// and the re-run converges with both replicas exact.

// r2Addr is replica r2's address as system.clusters gives it, which the
// refusals name.
const r2Addr = "127.0.0.1:19102"

// ordersBatches writes the two batches the tests apply: two new orders,
// then one of them paid and a third.
func ordersBatches(t *testing.T) (first, second string) {
	first = writeFile(t, "1.ion", encode(t, false,
		orderEvent(1, int64(10), int64(500), "new", int64(100), false), orderEvent(2, int64(20), int64(700), "new", int64(101), false)))
	second = writeFile(t, "2.ion", encode(t, true,
		orderEvent(1, int64(10), int64(550), "paid", int64(200), false), orderEvent(3, int64(30), int64(900), "new", int64(201), false)))
	return first, second
}

// bothBatches are the rows both batches leave.
var bothBatches = []string{
	orderLine(1, 10, 550, "paid", 200, false),
	orderLine(2, 20, 700, "new", 101, false),
	orderLine(3, 30, 900, "new", 201, false),
}

// ledgerSeqs is replica i's ledger as seq and kind per row, in seq order,
// once the replica fetched every part it knows of.
func (c *clusterEnv) ledgerSeqs(i int) []string {
	c.t.Helper()
	c.exec(context.Background(), i, "SYSTEM SYNC REPLICA "+c.db+".orders_cdc_ledger")
	return c.onReplica(i, "SELECT seq, kind FROM "+c.db+".orders_cdc_ledger ORDER BY seq, kind")
}

// setupAgain runs cdc setup through replica i (the repair the hints
// name) or fails the test.
func (c *clusterEnv) setupAgain(i int) {
	c.t.Helper()
	if _, err := testSetup(context.Background(), c.via(i, "")); err != nil {
		c.t.Fatalf("cdc setup through r%d: %v", i+1, err)
	}
}

// converges applies batch through replica i until it succeeds: a replica
// whose table setup made again may lack the acknowledged parts for a
// moment (REPLICA_IS_NOT_IN_QUORUM, transient: a scheduler's retry).
// Anything but a transient failure fails the test.
func (c *clusterEnv) converges(i int, batch string) *Result {
	c.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		res, err := testApply(context.Background(), c.via(i, batch))
		if err == nil {
			return res
		}
		if outcome.Classify(err) != outcome.Transient || time.Now().After(deadline) {
			c.t.Fatalf("the re-run through r%d: %v", i+1, err)
		}
		c.t.Logf("the re-run through r%d, retried: %v", i+1, err)
		time.Sleep(500 * time.Millisecond)
	}
}

// TestClusterLedgerMissingOnAReplica (finding 1): the ledger dropped on r2
// only, a batch applied through r2 used to make it again there as a new
// replica of the existing ZooKeeper path and append a baseline row of seq
// 1 beside batch 1's, which no re-run or setup could clear. Now the run
// refuses before the lock (exit 2, naming r2 and the ledger, hint: cdc
// setup) and appends nothing; setup makes the ledger again on r2, which
// fetches batch 1's row; the re-run records batch 2 as seq 2.
func TestClusterLedgerMissingOnAReplica(t *testing.T) {
	c := newClusterEnv(t)
	c.setup()
	first, second := ordersBatches(t)
	if _, err := testApply(context.Background(), c.via(0, first)); err != nil {
		t.Fatal(err)
	}
	c.exec(context.Background(), 1, "DROP TABLE "+c.db+".orders_cdc_ledger")
	_, err := testApply(context.Background(), c.via(1, second))
	wantRefused(t, err, outcome.Config, 2, target.ErrReplicaLacks, "cdc setup")
	wantError(t, err, outcome.Config, target.ErrReplicaLacks, r2Addr, "orders_cdc_ledger")
	if got := c.ledgerSeqs(0); !slices.Equal(got, []string{"1\tbatch"}) {
		t.Errorf("r1's ledger after the refused run: %v, want batch 1's row alone", got)
	}
	if got := c.onReplica(1, "SELECT count() FROM system.tables WHERE database = ? AND name = 'orders_cdc_ledger'", c.db); got[0] != "0" {
		t.Errorf("the refused run made the ledger on r2 again")
	}
	c.setupAgain(0)
	if res := c.converges(1, second); res.Pending != 2 {
		t.Errorf("the re-run: %v, want batch 2 applied", res.Outputs())
	}
	for i := range c.conns {
		if got := c.ledgerSeqs(i); !slices.Equal(got, []string{"1\tbatch", "2\tbatch"}) {
			t.Errorf("replica r%d ledger: %v, want one row of seq 1 and one of seq 2", i+1, got)
		}
	}
	c.sameOnEveryReplica(bothBatches)
	// And the next run finds nothing to refuse: a replay.
	if res := c.converges(0, second); res.Pending != 0 {
		t.Errorf("the replay: %v, want nothing pending", res.Outputs())
	}
}

// TestClusterTargetDiffersOnAReplica (finding 2): r2's target dropped,
// made a plain ReplacingMergeTree, or made at another ZooKeeper path used
// to fail every run through r1 transient (TOO_FEW_LIVE_REPLICAS, "retry
// once every replica is up": for ever). Now apply through either replica
// refuses at once (exit 2), naming r2 and the difference, and the hint
// names cdc setup; its repair (setup; for an odd table, dropped on r2
// first) converges.
func TestClusterTargetDiffersOnAReplica(t *testing.T) {
	cols := "(id Int64, customer_id Int64, amount_cents Int64, status String, _cdc_lsn UInt64, _cdc_deleted UInt8)"
	tests := []struct {
		name string
		make func(db string) string // r2's table, after the drop ("": none)
		is   error
		says []string
		odd  bool // the hint's repair drops r2's table before setup
	}{
		{"dropped", func(string) string { return "" }, target.ErrReplicaLacks, []string{r2Addr, "orders_cdc"}, false},
		{"plain", func(db string) string {
			return "CREATE TABLE " + db + ".orders_cdc " + cols + " ENGINE = ReplacingMergeTree(_cdc_lsn) ORDER BY id"
		}, target.ErrReplicasDisagree, []string{r2Addr, "orders_cdc", "ReplacingMergeTree", "not a Replicated table"}, true},
		{"another path", func(db string) string {
			return "CREATE TABLE " + db + ".orders_cdc " + cols + " ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/" + db +
				"/elsewhere', '{replica}', _cdc_lsn) ORDER BY id"
		}, target.ErrReplicasDisagree, []string{r2Addr, "orders_cdc", "/elsewhere"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClusterEnv(t)
			c.setup()
			first, second := ordersBatches(t)
			if _, err := testApply(context.Background(), c.via(0, first)); err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			c.exec(ctx, 1, "DROP TABLE "+c.db+".orders_cdc")
			if sql := tt.make(c.db); sql != "" {
				c.exec(ctx, 1, sql)
			}
			for _, via := range []int{0, 1} {
				start := time.Now()
				_, err := testApply(ctx, c.via(via, second))
				t.Logf("through r%d, after %s", via+1, time.Since(start).Round(time.Millisecond))
				wantRefused(t, err, outcome.Config, 2, tt.is, "cdc setup")
				wantError(t, err, outcome.Config, tt.is, tt.says...)
			}
			if got := c.ledgerSeqs(0); !slices.Equal(got, []string{"1\tbatch"}) {
				t.Errorf("r1's ledger after the refused runs: %v, want batch 1's row alone", got)
			}
			if tt.odd {
				// What setup says: the replicas disagree, naming r2.
				_, err := testSetup(ctx, c.via(0, ""))
				wantError(t, err, outcome.Config, target.ErrReplicasDisagree, r2Addr, "drop the odd one")
				c.exec(ctx, 1, "DROP TABLE "+c.db+".orders_cdc")
			}
			c.setupAgain(0)
			if res := c.converges(0, second); res.Pending != 2 {
				t.Errorf("the re-run: %v, want batch 2 applied", res.Outputs())
			}
			c.sameOnEveryReplica(bothBatches)
			for i := range c.conns {
				if got := c.ledgerSeqs(i); !slices.Equal(got, []string{"1\tbatch", "2\tbatch"}) {
					t.Errorf("replica r%d ledger: %v", i+1, got)
				}
			}
		})
	}
}

// TestClusterViewMissingOnAReplica (finding 4): the live view dropped on
// r2 went unnoticed by apply through r1, and readers of r2 failed. Now
// apply refuses, naming r2 and the view (exit 2, hint: cdc setup); setup
// makes it again on r2 and the re-run converges.
func TestClusterViewMissingOnAReplica(t *testing.T) {
	c := newClusterEnv(t)
	c.setup()
	first, second := ordersBatches(t)
	if _, err := testApply(context.Background(), c.via(0, first)); err != nil {
		t.Fatal(err)
	}
	c.exec(context.Background(), 1, "DROP TABLE "+c.db+".orders_live")
	_, err := testApply(context.Background(), c.via(0, second))
	wantRefused(t, err, outcome.Config, 2, target.ErrReplicaLacks, "cdc setup")
	wantError(t, err, outcome.Config, target.ErrReplicaLacks, r2Addr, "orders_live")
	c.setupAgain(0)
	if res := c.converges(0, second); res.Pending != 2 {
		t.Errorf("the re-run: %v, want batch 2 applied", res.Outputs())
	}
	c.sameOnEveryReplica(bothBatches)
	if got := c.onReplica(1, "SELECT count() FROM "+c.db+".orders_live"); got[0] != "3" {
		t.Errorf("r2's live view shows %s rows, want 3", got[0])
	}
}
