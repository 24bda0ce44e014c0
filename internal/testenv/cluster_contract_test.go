package testenv

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// The behaviours of a replicated ClickHouse 18.16 cluster that changesink's
// cluster targets rest on, checked on the cluster of .ci/clickhouse-cluster
// from Go through clickhouse-go: ON CLUSTER DDL, quorum inserts read on the
// other replica, insert deduplication, the error codes of a replica or
// ZooKeeper down, and why the single server's lock does not span replicas.
// docs/design/clickhouse-cluster.md holds the same findings, with the SQL.

// The ClickHouse error codes these tests expect (src/Common/ErrorCodes.cpp).
const (
	codeTableAlreadyExists      = 57
	codeBadGet                  = 170 // ON CLUSTER with a cluster remote_servers lacks
	codeTableIsReadOnly         = 242 // a Replicated table without a ZooKeeper session
	codeTooFewLiveReplicas      = 285
	codeUnsatisfiedQuorumBefore = 286 // the previous quorum insert still waits for a replica
	codeUnknownStatusOfInsert   = 319 // quorum not reached in time: the part may land later
	codeKeeperException         = 999 // ZooKeeper unreachable
)

// clusterTable is a ReplicatedReplacingMergeTree made ON CLUSTER in a
// database of the test's own, with a connection to each replica.
type clusterTable struct {
	c     *ClickHouseCluster
	name  string // db.t
	zk    string // its ZooKeeper path, macros expanded
	conns []driver.Conn
}

func newClusterTable(t *testing.T) *clusterTable {
	t.Helper()
	c := Cluster(t)
	db := c.CreateDatabase("tenv_cl_")
	ct := &clusterTable{c: c, name: db + ".t", zk: "/clickhouse/tables/01/" + db + "/t"}
	for _, u := range c.Replicas {
		ct.conns = append(ct.conns, OpenClickHouse(t, u))
	}
	ct.exec(t, 0, nil, "CREATE TABLE "+ct.name+" ON CLUSTER "+c.Name+
		" (id Int64, name String, _version UInt64, _deleted UInt8)"+
		" ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/"+db+"/t', '{replica}', _version) ORDER BY id")
	return ct
}

// quorum asks an insert to return once both replicas hold it, waiting at
// most ms for the second.
func quorum(ms int) clickhouse.Settings {
	return clickhouse.Settings{"insert_quorum": 2, "insert_quorum_timeout": ms}
}

var sequential = clickhouse.Settings{"select_sequential_consistency": 1}

func withSettings(s clickhouse.Settings) context.Context {
	if s == nil {
		return context.Background()
	}
	return clickhouse.Context(context.Background(), clickhouse.WithSettings(s))
}

func (ct *clusterTable) exec(t *testing.T, replica int, s clickhouse.Settings, sql string) {
	t.Helper()
	if err := ct.tryExec(replica, s, sql); err != nil {
		t.Fatalf("r%d: %s: %v", replica+1, sql, err)
	}
}

func (ct *clusterTable) tryExec(replica int, s clickhouse.Settings, sql string) error {
	ctx, cancel := context.WithTimeout(withSettings(s), time.Minute)
	defer cancel()
	return ct.conns[replica].Exec(ctx, sql)
}

// insert sends one block of rows (id, name, version) through replica.
func (ct *clusterTable) insert(replica int, s clickhouse.Settings, rows ...row) error {
	ctx, cancel := context.WithTimeout(withSettings(s), time.Minute)
	defer cancel()
	b, err := ct.conns[replica].PrepareBatch(ctx, "INSERT INTO "+ct.name+" (id, name, _version, _deleted)")
	if err != nil {
		return err
	}
	defer b.Close()
	for _, r := range rows {
		if err := b.Append(r.id, r.name, r.version, uint8(0)); err != nil {
			return err
		}
	}
	return b.Send()
}

type row struct {
	id      int64
	name    string
	version uint64
}

func (r row) String() string { return fmt.Sprintf("%d:%s@%d", r.id, r.name, r.version) }

// read returns the rows of the table on replica as FINAL merges them, in
// id order ("" and the error when the read fails).
func (ct *clusterTable) read(replica int, s clickhouse.Settings, final bool) (string, error) {
	ctx, cancel := context.WithTimeout(withSettings(s), 30*time.Second)
	defer cancel()
	fin := ""
	if final {
		fin = " FINAL"
	}
	rows, err := ct.conns[replica].Query(ctx, "SELECT id, name, _version FROM "+ct.name+fin+" ORDER BY id, _version")
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.id, &r.name, &r.version); err != nil {
			return "", err
		}
		got = append(got, r.String())
	}
	return strings.Join(got, " "), rows.Err()
}

func (ct *clusterTable) mustRead(t *testing.T, replica int, s clickhouse.Settings, final bool) string {
	t.Helper()
	got, err := ct.read(replica, s, final)
	if err != nil {
		t.Fatalf("read %s on r%d: %v", ct.name, replica+1, err)
	}
	return got
}

// code is the ClickHouse exception code in err's chain, or 0.
func code(err error) int32 {
	var ex *clickhouse.Exception
	if errors.As(err, &ex) {
		return ex.Code
	}
	return 0
}

// TestClusterQuorumInsertReadOnOtherReplica: a table made ON CLUSTER exists
// on both replicas at one ZooKeeper path; an insert with insert_quorum=2 is
// read at once, FINAL, on the other replica; an identical block sent again,
// through either replica, is deduplicated (one physical row).
func TestClusterQuorumInsertReadOnOtherReplica(t *testing.T) {
	ct := newClusterTable(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i, conn := range ct.conns {
		var path, replica string
		var total, active uint8
		if err := conn.QueryRow(ctx, "SELECT zookeeper_path, replica_name, total_replicas, active_replicas FROM system.replicas WHERE database = ? AND table = 't'",
			strings.TrimSuffix(ct.name, ".t")).Scan(&path, &replica, &total, &active); err != nil {
			t.Fatalf("r%d: read system.replicas: %v", i+1, err)
		}
		if want := fmt.Sprintf("r%d", i+1); path != ct.zk || replica != want || total != 2 || active != 2 {
			t.Errorf("r%d: system.replicas: path %s, replica %s, %d of %d active; want %s, %s, 2 of 2", i+1, path, replica, active, total, ct.zk, want)
		}
	}

	v1 := row{1, "v1", 100}
	if err := ct.insert(0, quorum(10000), v1); err != nil {
		t.Fatalf("quorum insert through r1: %v", err)
	}
	if got := ct.mustRead(t, 1, nil, true); got != v1.String() {
		t.Errorf("FINAL on r2 right after the quorum insert on r1 = %q, want %q", got, v1)
	}
	v2 := row{1, "v2", 200}
	if err := ct.insert(1, quorum(10000), v2); err != nil {
		t.Fatalf("quorum insert through r2: %v", err)
	}
	if got := ct.mustRead(t, 0, sequential, true); got != v2.String() {
		t.Errorf("FINAL on r1 (sequential consistency) after the quorum insert on r2 = %q, want %q", got, v2)
	}

	// The same block again, through the other replica: ZooKeeper's
	// /blocks knows its hash, so nothing is written, and no error.
	if err := ct.insert(0, quorum(10000), v2); err != nil {
		t.Fatalf("the same block again through r1: %v", err)
	}
	for i := range ct.conns {
		if got, want := ct.mustRead(t, i, nil, false), v1.String()+" "+v2.String(); got != want {
			t.Errorf("physical rows on r%d after a block sent twice = %q, want %q (deduplicated)", i+1, got, want)
		}
	}

	// Every replica is reached, from r1, through remote() at the addresses
	// of system.clusters: how setup can check a table on each replica.
	rows, err := ct.conns[0].Query(ctx, "SELECT host_name, port FROM system.clusters WHERE cluster = ? ORDER BY replica_num", ct.c.Name)
	if err != nil {
		t.Fatalf("read system.clusters: %v", err)
	}
	var addrs []string
	for rows.Next() {
		var host string
		var port uint16
		if err := rows.Scan(&host, &port); err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, fmt.Sprintf("%s:%d", host, port))
	}
	rows.Close()
	if len(addrs) != 2 {
		t.Fatalf("system.clusters lists %d replicas of %s, want 2: %v", len(addrs), ct.c.Name, addrs)
	}
	for _, a := range addrs {
		var engine string
		if err := ct.conns[0].QueryRow(ctx, "SELECT engine FROM remote('"+a+"', system.tables) WHERE database = ? AND name = 't'",
			strings.TrimSuffix(ct.name, ".t")).Scan(&engine); err != nil {
			t.Fatalf("read system.tables of %s through remote(): %v", a, err)
		}
		if engine != "ReplicatedReplacingMergeTree" {
			t.Errorf("engine on %s = %s, want ReplicatedReplacingMergeTree", a, engine)
		}
	}
}

// TestClusterLocksAndDDL: the single server's lock (CREATE TABLE ... ENGINE
// = Memory AS SELECT, atomic per server) is taken on both replicas at once;
// the same CREATE ON CLUSTER from both replicas at once succeeds once, the
// other failing with 57 from every replica (ZooKeeper's DDL queue orders
// them); ON CLUSTER with an unknown cluster is 170.
func TestClusterLocksAndDDL(t *testing.T) {
	ct := newClusterTable(t)
	db := strings.TrimSuffix(ct.name, ".t")
	for i := range ct.conns {
		if err := ct.tryExec(i, nil, "CREATE TABLE "+db+".t_lock ENGINE = Memory AS SELECT 'r"+fmt.Sprint(i+1)+"' AS holder, now() AS beat"); err != nil {
			t.Fatalf("take the single-server lock on r%d: %v (want: taken on both, it is per server)", i+1, err)
		}
	}
	if err := ct.tryExec(0, nil, "CREATE TABLE "+db+".t_lock ENGINE = Memory AS SELECT 'again' AS holder, now() AS beat"); code(err) != codeTableAlreadyExists {
		t.Errorf("take the single-server lock on r1 again: %v, want code %d", err, codeTableAlreadyExists)
	}

	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range ct.conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = ct.tryExec(i, nil, "CREATE TABLE "+db+".t_cl_lock ON CLUSTER "+ct.c.Name+" ENGINE = Memory AS SELECT 'r"+fmt.Sprint(i+1)+"' AS holder")
		}()
	}
	wg.Wait()
	won := -1
	for i, err := range errs {
		switch {
		case err == nil && won < 0:
			won = i
		case err == nil:
			t.Errorf("both CREATE ... ON CLUSTER of one table succeeded")
		case code(err) != codeTableAlreadyExists:
			t.Errorf("CREATE ... ON CLUSTER through r%d: %v, want nil or code %d", i+1, err, codeTableAlreadyExists)
		}
	}
	if won < 0 {
		t.Fatalf("neither CREATE ... ON CLUSTER succeeded: %v", errs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i, conn := range ct.conns {
		var holder string
		if err := conn.QueryRow(ctx, "SELECT holder FROM "+db+".t_cl_lock").Scan(&holder); err != nil {
			t.Fatalf("read the ON CLUSTER lock on r%d: %v", i+1, err)
		}
		if want := fmt.Sprintf("r%d", won+1); holder != want {
			t.Errorf("the ON CLUSTER lock on r%d holds %s, want the winner %s on every replica", i+1, holder, want)
		}
	}

	if err := ct.tryExec(0, nil, "CREATE TABLE "+db+".x ON CLUSTER no_such_cluster (a UInt8) ENGINE = Memory"); code(err) != codeBadGet {
		t.Errorf("ON CLUSTER with an unknown cluster: %v, want code %d", err, codeBadGet)
	}
}

// TestClusterReplicaDown: with r2 killed, a quorum insert on r1 fails: 319
// (unknown status; the part is on r1 and lands on r2 once it is back) while
// ZooKeeper still holds r2's session, then 286 (that quorum still open) or
// 285 (too few live replicas); r2 refuses connections. Once r2 is back the
// open quorum completes, the part of the 319 is on both, and sending that
// block again is deduplicated.
func TestClusterReplicaDown(t *testing.T) {
	ct := newClusterTable(t)
	v1 := row{1, "v1", 100}
	if err := ct.insert(0, quorum(10000), v1); err != nil {
		t.Fatalf("quorum insert, both replicas up: %v", err)
	}
	ct.c.Ctl("kill", "r2")

	v2 := row{1, "v2", 200}
	err := ct.insert(0, quorum(2000), v2)
	if c := code(err); c != codeUnknownStatusOfInsert && c != codeTooFewLiveReplicas {
		t.Fatalf("quorum insert on r1 with r2 killed: %v, want code %d or %d", err, codeUnknownStatusOfInsert, codeTooFewLiveReplicas)
	}
	landed := code(err) == codeUnknownStatusOfInsert
	t.Logf("quorum insert on r1, r2 killed: code %d", code(err))
	killed := time.Now()
	// r2's ZooKeeper session ends (6 s, .ci/clickhouse-cluster.d): then
	// every quorum insert fails at once with 285.
	deadline := time.Now().Add(45 * time.Second)
	for {
		err = ct.insert(0, quorum(2000), row{2, "other", 300})
		if code(err) == codeTooFewLiveReplicas {
			t.Logf("code %d %s after the kill", codeTooFewLiveReplicas, time.Since(killed).Round(100*time.Millisecond))
			break
		}
		if c := code(err); c != codeUnknownStatusOfInsert && c != codeUnsatisfiedQuorumBefore {
			t.Fatalf("quorum insert on r1 with r2 killed: %v, want code %d, %d or %d", err, codeTooFewLiveReplicas, codeUnknownStatusOfInsert, codeUnsatisfiedQuorumBefore)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no code %d within 45 s of killing r2; last: %v", codeTooFewLiveReplicas, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if _, err := ct.read(1, nil, true); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("read on the killed r2: %v, want connection refused", err)
	}
	// r1 answers plain reads, its own part of the 319 included; sequential
	// consistency hides that part until its quorum completes.
	want := v1.String()
	if landed {
		want = v2.String()
	}
	if got := ct.mustRead(t, 0, nil, true); got != want {
		t.Errorf("FINAL on r1 with r2 killed = %q, want %q", got, want)
	}
	if got := ct.mustRead(t, 0, sequential, true); got != v1.String() {
		t.Errorf("FINAL on r1 with r2 killed, sequential consistency = %q, want %q (the last quorum write)", got, v1)
	}

	back := time.Now()
	ct.c.Repair()
	if landed {
		// r2 fetches the part, which completes its quorum.
		deadline := time.Now().Add(60 * time.Second)
		for ct.mustRead(t, 1, sequential, true) != v2.String() {
			if time.Now().After(deadline) {
				t.Fatalf("the part of the 319 insert is not on r2 (sequential consistency) 60 s after r2 came back: %q", ct.mustRead(t, 1, nil, true))
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	// The block of the failed insert again: written once in all.
	deadline = time.Now().Add(60 * time.Second)
	for {
		err := ct.insert(0, quorum(10000), v2)
		if err == nil {
			break
		}
		if c := code(err); c != codeUnsatisfiedQuorumBefore && c != codeTableIsReadOnly && c != codeUnknownStatusOfInsert {
			t.Fatalf("the 319's block again after r2 came back: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the 319's block again: still failing 60 s after r2 came back: %v", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("the 319's block sent again, deduplicated, %s after the restart of r2 began", time.Since(back).Round(100*time.Millisecond))
	for i := range ct.conns {
		if got := ct.mustRead(t, i, nil, false); got != v1.String()+" "+v2.String() {
			t.Errorf("physical rows on r%d after the retry = %q, want %q", i+1, got, v1.String()+" "+v2.String())
		}
	}
}

// TestClusterZooKeeperDown: with ZooKeeper killed, inserts fail (242, the
// table is read-only without a session, or 999 when the session is lost
// mid-call), plain reads still answer, and sequential consistency and ON
// CLUSTER fail with 999; once ZooKeeper is back, inserts succeed again.
func TestClusterZooKeeperDown(t *testing.T) {
	ct := newClusterTable(t)
	v1 := row{1, "v1", 100}
	if err := ct.insert(0, quorum(10000), v1); err != nil {
		t.Fatalf("quorum insert, ZooKeeper up: %v", err)
	}
	ct.c.Ctl("kill", "zookeeper")

	for _, s := range []clickhouse.Settings{nil, quorum(2000)} {
		if err := ct.insert(0, s, row{1, "v2", 200}); code(err) != codeTableIsReadOnly && code(err) != codeKeeperException {
			t.Errorf("insert (settings %v) with ZooKeeper down: %v, want code %d or %d", s, err, codeTableIsReadOnly, codeKeeperException)
		}
	}
	if got := ct.mustRead(t, 1, nil, true); got != v1.String() {
		t.Errorf("FINAL on r2 with ZooKeeper down = %q, want %q", got, v1)
	}
	if _, err := ct.read(0, sequential, true); code(err) != codeKeeperException {
		t.Errorf("sequential read with ZooKeeper down: %v, want code %d", err, codeKeeperException)
	}
	db := strings.TrimSuffix(ct.name, ".t")
	if err := ct.tryExec(0, nil, "CREATE TABLE "+db+".x ON CLUSTER "+ct.c.Name+" (a UInt8) ENGINE = Memory"); code(err) != codeKeeperException {
		t.Errorf("ON CLUSTER with ZooKeeper down: %v, want code %d", err, codeKeeperException)
	}

	back := time.Now()
	ct.c.Repair()
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := ct.insert(0, quorum(10000), row{1, "v3", 300})
		if err == nil {
			t.Logf("a quorum insert succeeds again %s after the restart of ZooKeeper began", time.Since(back).Round(100*time.Millisecond))
			break
		}
		if c := code(err); c != codeTableIsReadOnly && c != codeKeeperException && c != codeTooFewLiveReplicas {
			t.Fatalf("quorum insert after ZooKeeper came back: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("quorum insert still fails 60 s after ZooKeeper came back: %v", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if got := ct.mustRead(t, 1, sequential, true); got != "1:v3@300" {
		t.Errorf("FINAL on r2 after ZooKeeper came back = %q, want 1:v3@300", got)
	}
}
