package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// The replicated ClickHouse cluster of .ci/clickhouse-cluster, as .ci/env
// describes it: its name in remote_servers, the native URL of each
// replica, and the script that kills, pauses and restarts its servers.
const (
	clusterVar    = "CHANGESINK_TEST_CLICKHOUSE_CLUSTER"
	clusterR1Var  = "CHANGESINK_TEST_CLICKHOUSE_R1"
	clusterR2Var  = "CHANGESINK_TEST_CLICKHOUSE_R2"
	clusterCtlVar = "CHANGESINK_TEST_CLICKHOUSE_CLUSTER_CTL"
)

// ClickHouseCluster is the test cluster, held by one test at a time.
type ClickHouseCluster struct {
	t        testing.TB
	Name     string
	Replicas []string // native URLs of r1, r2 (database default)
	ctl      string
}

// Cluster returns the test cluster, or skips the test loudly (fails it
// under CHANGESINK_REQUIRE_SERVICES=1) when .ci/env does not describe one.
// The test holds the cluster alone until it ends (an exclusive lock of a
// file every checkout's tests share), since tests stop and pause its
// servers; every server answers when it returns (a test before it that
// failed half-way is repaired: paused servers resumed, stopped ones
// started).
func Cluster(t testing.TB) *ClickHouseCluster {
	t.Helper()
	ClickHouseHas(t, ClickHouseReplicas)
	v := Lookup(t, clusterVar, clusterR1Var, clusterR2Var, clusterCtlVar)
	c := &ClickHouseCluster{t: t, Name: v[clusterVar], Replicas: []string{v[clusterR1Var], v[clusterR2Var]}, ctl: v[clusterCtlVar]}
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "changesink-clickhouse-cluster-tests.lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatalf("open the cluster tests' lock file: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatalf("lock the test cluster: %v", err)
	}
	t.Cleanup(func() { f.Close() }) // closing the file gives the lock back
	c.Repair()
	return c
}

// Repair resumes paused servers and starts stopped ones, then waits until
// every replica answers.
func (c *ClickHouseCluster) Repair() {
	c.t.Helper()
	for _, name := range []string{"zookeeper", "r1", "r2"} {
		c.ctlQuiet("resume", name)
	}
	c.Ctl("start")
	for _, url := range c.Replicas {
		c.WaitAnswers(url, time.Minute)
	}
}

// Ctl runs the cluster's script with args (kill|pause|resume NAME, start),
// failing the test when it fails.
func (c *ClickHouseCluster) Ctl(args ...string) {
	c.t.Helper()
	if out, err := c.run(args...); err != nil {
		c.t.Fatalf("%s %s: %v\n%s", c.ctl, strings.Join(args, " "), err, out)
	}
}

// ctlQuiet runs the script and ignores its failure (a server that is not
// paused, say).
func (c *ClickHouseCluster) ctlQuiet(args ...string) { _, _ = c.run(args...) }

func (c *ClickHouseCluster) run(args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	return exec.CommandContext(ctx, c.ctl, args...).CombinedOutput()
}

// WaitAnswers waits until the server at url answers a query that reads
// ZooKeeper and its Replicated tables are healthy: none read-only or with
// an expired ZooKeeper session, every replica active and nothing left to
// fetch or merge (a replica restarted,
// or resumed after ZooKeeper expired its session, answers before its
// tables have their session again).
func (c *ClickHouseCluster) WaitAnswers(url string, within time.Duration) {
	c.t.Helper()
	conn := OpenClickHouse(c.t, url)
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var n, sick uint64
		err := conn.QueryRow(ctx, "SELECT count() FROM system.zookeeper WHERE path = '/'").Scan(&n)
		if err == nil {
			err = conn.QueryRow(ctx, "SELECT count() FROM system.replicas WHERE is_readonly OR is_session_expired OR "+
				"active_replicas < total_replicas OR queue_size > 0").Scan(&sick)
		}
		cancel()
		if err == nil && sick > 0 {
			err = fmt.Errorf("%d Replicated tables are read-only, without their ZooKeeper session, with a replica away or a queue", sick)
		}
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("ClickHouse %s does not answer (or not see ZooKeeper) after %s: %v", url, within, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// CreateDatabase creates a database of the test's own on every replica
// (ON CLUSTER), named by UniqueName(t, prefix), and drops it ON CLUSTER
// when the test ends, after repairing the cluster (the drop removes the
// Replicated tables' ZooKeeper nodes).
func (c *ClickHouseCluster) CreateDatabase(prefix string) string {
	c.t.Helper()
	name := UniqueName(c.t, prefix)
	conn := OpenClickHouse(c.t, c.Replicas[0])
	if err := c.ddl(conn, "CREATE DATABASE "+name+" ON CLUSTER "+c.Name); err != nil {
		c.t.Fatalf("create the test database %s on cluster %s: %v", name, c.Name, err)
	}
	c.t.Cleanup(func() {
		c.Repair()
		if err := c.ddl(conn, "DROP DATABASE IF EXISTS "+name+" ON CLUSTER "+c.Name); err != nil {
			c.t.Logf("drop the test database %s on cluster %s: %v", name, c.Name, err)
		}
	})
	return name
}

// ddl runs an ON CLUSTER statement, again for up to 30 s while it fails:
// the first ZooKeeper call of a server whose session expired (ZooKeeper
// restarted, or the server was frozen) fails, and the next one renews it.
func (c *ClickHouseCluster) ddl(conn driver.Conn, sql string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := conn.Exec(ctx, sql)
		cancel()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(500 * time.Millisecond)
	}
}
