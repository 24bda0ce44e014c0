package testenv

import (
	"context"
	"database/sql"
	"errors"
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
// fetch or merge, and every replica in each table's leader election (a
// replica restarted, or resumed after ZooKeeper expired its session,
// answers before its tables have their session again, and joins the
// election later still: a quorum insert before that is refused).
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
			err = electing(conn)
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

// electing fails unless this replica's Replicated tables are active in
// its own session and every table has as many replicas in its leader
// election as it has replicas: the count an insert with insert_quorum
// checks first ("Number of alive replicas"). A killed and restarted
// replica answers, and looks active, while the ephemeral nodes of its old
// session live (ZooKeeper's session timeout); they expire, and the
// replica joins again seconds later: an is_active node older than the
// server's start is the old session's.
func electing(conn driver.Conn) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var started time.Time
	if err := conn.QueryRow(ctx, "SELECT now() - uptime()").Scan(&started); err != nil {
		return err
	}
	rows, err := conn.Query(ctx, "SELECT zookeeper_path, replica_path, total_replicas FROM system.replicas")
	if err != nil {
		return err
	}
	type table struct {
		path, replica string
		total         uint8
	}
	var tables []table
	for rows.Next() {
		var t table
		if err := rows.Scan(&t.path, &t.replica, &t.total); err != nil {
			rows.Close()
			return err
		}
		tables = append(tables, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, t := range tables {
		var active time.Time
		switch err := conn.QueryRow(ctx, "SELECT ctime FROM system.zookeeper WHERE path = ? AND name = 'is_active'", t.replica).Scan(&active); {
		case errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("%s: not active", t.replica)
		case err != nil:
			return err
		case active.Add(time.Second).Before(started):
			return fmt.Errorf("%s: active in an old session (is_active made %s, the server started %s)", t.replica, active, started)
		}
		var n uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM system.zookeeper WHERE path = ?", t.path+"/leader_election").Scan(&n); err != nil {
			return err
		}
		if n < uint64(t.total) {
			return fmt.Errorf("%s: %d of %d replicas in its leader election", t.path, n, t.total)
		}
	}
	return nil
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
