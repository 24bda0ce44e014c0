package cdc

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
	"github.com/changesink/changesink/tasks/cdc/target"
)

// The tests of targets on a cluster run on the cluster of
// .ci/clickhouse-cluster: ZooKeeper and the two replicas r1, r2 of one
// shard (docs/design/clickhouse-cluster.md).

// clusterEnv is a target on the test cluster: a database of the test's
// own on every replica, the orders mapping in it naming the cluster, and
// a connection to each replica.
type clusterEnv struct {
	*env
	cl    *testenv.ClickHouseCluster
	conns []driver.Conn // r1, r2
}

func newClusterEnv(t *testing.T) *clusterEnv {
	t.Helper()
	cl := testenv.Cluster(t)
	db := cl.CreateDatabase("cdc_cl_")
	e := &env{t: t, url: cl.Replicas[0], conn: testenv.OpenClickHouse(t, cl.Replicas[0]), db: db}
	e.m = loadMapping(t, ordersMapping)
	e.m.Target.Database = db
	e.m.Target.CreateDatabase = false
	e.m.Target.Cluster = cl.Name
	c := &clusterEnv{env: e, cl: cl}
	for _, u := range cl.Replicas {
		c.conns = append(c.conns, testenv.OpenClickHouse(t, u))
	}
	return c
}

// via is the config that applies batch through replica i (0: r1, 1: r2).
func (c *clusterEnv) via(i int, batch string) testRun {
	cfg := c.config(batch)
	cfg.ClickHouse.URL = c.cl.Replicas[i]
	return cfg
}

// onReplica runs sql on replica i and returns its rows as tab-joined
// strings.
func (c *clusterEnv) onReplica(i int, sql string, args ...any) []string {
	c.t.Helper()
	e := *c.env
	e.conn = c.conns[i]
	return e.query(sql, args...)
}

// replicaRows is the target as replica i holds it, read locally (no
// quorum read), after it has fetched every part it knows of: each key's
// winning row, in key order.
func (c *clusterEnv) replicaRows(i int) []string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.conns[i].Exec(ctx, "SYSTEM SYNC REPLICA "+c.db+".orders_cdc"); err != nil {
		c.t.Fatalf("sync replica %d: %v", i+1, err)
	}
	return c.onReplica(i, "SELECT id, customer_id, amount_cents, status, _cdc_lsn, _cdc_deleted FROM "+c.db+".orders_cdc FINAL ORDER BY id")
}

// sameOnEveryReplica fails the test unless every replica holds want, row
// by row.
func (c *clusterEnv) sameOnEveryReplica(want []string) {
	c.t.Helper()
	for i := range c.conns {
		if got := c.replicaRows(i); !slices.Equal(got, want) {
			c.t.Errorf("replica r%d holds\n%s\nwant\n%s", i+1, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

// orderLine is a target row as replicaRows renders it.
func orderLine(id, customer, amount int64, status string, lsn int64, deleted bool) string {
	d := 0
	if deleted {
		d = 1
	}
	return fmt.Sprintf("%d\t%d\t%d\t%s\t%d\t%d", id, customer, amount, status, lsn, d)
}

// TestClusterSetup: cdc setup through r1 creates the target, its view,
// its ledger and its lock ON CLUSTER, Replicated at the documented
// ZooKeeper paths; r2 has them too, and setup through r2 finds them in
// place.
func TestClusterSetup(t *testing.T) {
	c := newClusterEnv(t)
	res, err := testSetup(context.Background(), c.via(0, ""))
	if err != nil {
		t.Fatalf("Setup through r1: %v", err)
	}
	for _, s := range res.Statements {
		if !strings.Contains(s, " ON CLUSTER "+c.cl.Name) {
			t.Errorf("a statement without ON CLUSTER: %s", s)
		}
	}
	for i := range c.conns {
		got := c.onReplica(i, "SELECT name, engine, engine_full FROM system.tables WHERE database = ? ORDER BY name", c.db)
		want := []string{
			"orders_cdc\tReplicatedReplacingMergeTree\tReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/" + c.db + "/orders_cdc', '{replica}', _cdc_lsn) ORDER BY id SETTINGS index_granularity = 8192",
			"orders_cdc_ledger\tReplicatedMergeTree\tReplicatedMergeTree('/clickhouse/tables/{shard}/" + c.db + "/orders_cdc_ledger', '{replica}') ORDER BY seq SETTINGS index_granularity = 8192",
			"orders_cdc_lock\tReplicatedMergeTree\tReplicatedMergeTree('/clickhouse/tables/{shard}/" + c.db + "/orders_cdc_lock', '{replica}') PARTITION BY toDate(beat) ORDER BY (holder, beat) SETTINGS index_granularity = 8192",
			"orders_live\tView\t",
		}
		if !slices.Equal(got, want) {
			t.Errorf("replica r%d has\n%s\nwant\n%s", i+1, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	// Each replica registered under the table's ZooKeeper path.
	got := c.onReplica(0, "SELECT name FROM system.zookeeper WHERE path = ? ORDER BY name", "/clickhouse/tables/01/"+c.db+"/orders_cdc/replicas")
	if !slices.Equal(got, []string{"r1", "r2"}) {
		t.Errorf("replicas in ZooKeeper: %v, want r1, r2", got)
	}
	if _, err := testSetup(context.Background(), c.via(1, "")); err != nil {
		t.Errorf("Setup again through r2: %v", err)
	}
}

// TestClusterApplyOnEitherReplica: batches applied through r1, then r2,
// then both (a URL naming both replicas, whose connections alternate
// between them: the insert and the read-back may go to different
// replicas) leave every replica with the same rows, the expected ones.
func TestClusterApplyOnEitherReplica(t *testing.T) {
	c := newClusterEnv(t)
	c.setup()
	both := "clickhouse://" + hostOf(t, c.cl.Replicas[0]) + "," + hostOf(t, c.cl.Replicas[1]) + "/default?connection_open_strategy=round_robin"
	steps := []struct {
		url    string
		events []any
	}{
		{c.cl.Replicas[0], []any{orderEvent(1, int64(10), int64(500), "new", int64(100), false), orderEvent(2, int64(20), int64(700), "new", int64(101), false)}},
		{c.cl.Replicas[1], []any{orderEvent(1, int64(10), int64(550), "paid", int64(200), false), orderEvent(3, int64(30), int64(900), "new", int64(201), false)}},
		{both, []any{orderEvent(2, int64(20), int64(700), "new", int64(300), true), orderEvent(4, int64(40), int64(100), "new", int64(301), false)}},
	}
	for i, s := range steps {
		cfg := c.config(writeFile(t, fmt.Sprintf("b%d.ion", i), encode(t, i%2 == 1, s.events...)))
		cfg.ClickHouse.URL = s.url
		res, err := testApply(context.Background(), cfg)
		if err != nil {
			t.Fatalf("batch %d: %v", i+1, err)
		}
		if res.Pending != 2 || res.Verified != 2 {
			t.Errorf("batch %d: %v", i+1, res.Outputs())
		}
	}
	c.sameOnEveryReplica([]string{
		orderLine(1, 10, 550, "paid", 200, false),
		orderLine(2, 0, 0, "", 300, true), // a delete marker keeps the key only
		orderLine(3, 30, 900, "new", 201, false),
		orderLine(4, 40, 100, "new", 301, false),
	})
	for i := range c.conns {
		if got := c.onReplica(i, "SELECT count() FROM "+c.db+".orders_cdc_ledger"); got[0] != "3" {
			t.Errorf("replica r%d: %s ledger rows, want 3", i+1, got[0])
		}
	}
}

// hostOf is the host:port of a clickhouse:// URL.
func hostOf(t *testing.T, u string) string {
	t.Helper()
	h, _, ok := strings.Cut(strings.TrimPrefix(u, "clickhouse://"), "/")
	if !ok {
		t.Fatalf("not a clickhouse:// URL with a path: %s", u)
	}
	return h
}

// TestClusterRefusals: a cluster the servers do not know, a replicated
// target whose mapping names no cluster, a cluster target that is not
// replicated, and replicas that disagree are refused with their causes.
func TestClusterRefusals(t *testing.T) {
	c := newClusterEnv(t)
	ctx := context.Background()
	t.Run("unknown cluster", func(t *testing.T) {
		cfg := c.via(0, "")
		m := *c.m
		m.Target.Cluster = "no_such_cluster"
		cfg.Mapping = &m
		_, err := testSetup(ctx, cfg)
		wantError(t, err, outcome.Config, target.ErrNoCluster, "no_such_cluster")
	})
	c.setup()
	t.Run("no cluster named", func(t *testing.T) {
		cfg := c.via(1, writeFile(t, "a.ion", encode(t, false, orderEvent(1, int64(10), int64(500), "new", int64(100), false))))
		m := *c.m
		m.Target.Cluster = ""
		cfg.Mapping = &m
		_, err := testApply(ctx, cfg)
		wantError(t, err, outcome.Config, target.ErrClusterNotNamed, "ReplicatedReplacingMergeTree", "target.cluster")
		_, err = testSetup(ctx, cfg)
		wantError(t, err, outcome.Config, target.ErrClusterNotNamed)
	})
	t.Run("view differs on r2", func(t *testing.T) {
		for _, sql := range []string{"DROP TABLE " + c.db + ".orders_live",
			"CREATE VIEW " + c.db + ".orders_live AS SELECT id, status FROM " + c.db + ".orders_cdc FINAL WHERE _cdc_deleted = 0"} {
			if err := c.conns[1].Exec(ctx, sql); err != nil {
				t.Fatal(err)
			}
		}
		_, err := testSetup(ctx, c.via(0, ""))
		wantError(t, err, outcome.Config, target.ErrReplicasDisagree, "127.0.0.1:19102", "orders_live")
	})
	t.Run("not replicated on a cluster", func(t *testing.T) {
		cfg := c.via(0, "")
		m := *c.m
		m.Target.Table = "plain"
		m.Target.LiveView = "plain_live"
		cfg.Mapping = &m
		if err := c.conns[0].Exec(ctx, "CREATE TABLE "+c.db+".plain (id Int64, customer_id Int64, amount_cents Int64, status String, "+
			"_cdc_lsn UInt64, _cdc_deleted UInt8) ENGINE = ReplacingMergeTree(_cdc_lsn) ORDER BY id"); err != nil {
			t.Fatal(err)
		}
		_, err := testSetup(ctx, cfg)
		wantError(t, err, outcome.Config, target.ErrNotReplicated, "plain")
	})
}
