package target

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
)

// A target on a cluster (the mapping's target.cluster; the design and what
// ClickHouse 18.16 does are in docs/design/clickhouse-cluster.md):
//
//   - setup creates the target, its live view, its ledger and its lock ON
//     CLUSTER, the tables as Replicated tables whose ZooKeeper path is
//     zooKeeperPath (the shard's {shard} macro, the database, the table) and
//     whose replica is the {replica} macro; it then checks the four on every
//     replica of the shard (checkReplicas) and refuses replicas that
//     disagree;
//   - every INSERT is a quorum insert (insert_quorum: every replica of the
//     shard), acknowledged only once every replica holds the part, and
//     every SELECT asks for sequential consistency
//     (select_sequential_consistency), so it fails (transient) on a replica
//     that lacks a part acknowledged so, and never shows a part that was not;
//     so a read, the read-back included, sees every acknowledged write on
//     whichever replica answers;
//   - one writer across the replicas: the lock is a Replicated table of
//     claims (clusterlock.go), which several runs write at once and which
//     is read plainly (plainRead).
//
// A replica down or lagging, or ZooKeeper unreachable, fails the write:
// transient (ErrReplicaUnavailable); the re-run converges once it is back.

// zkPrefix is the ZooKeeper path under which setup creates the tables of
// a clustered target: one node per shard ({shard}), then database and
// table.
const zkPrefix = "/clickhouse/tables/{shard}/"

// zooKeeperPath is the ZooKeeper path setup gives the Replicated table
// db.table: /clickhouse/tables/{shard}/<db>/<table>, each name escaped as
// a URL path segment (a / in a name is %2F, { is %7B), so that no name
// adds a level or a macro.
func zooKeeperPath(db, table string) string {
	return zkPrefix + url.PathEscape(db) + "/" + url.PathEscape(table)
}

// clusterInfo is the cluster of a target as system.clusters lists it.
type clusterInfo struct {
	name string
	// replicas are the host:port of the shard's replicas (native
	// protocol), in replica_num order.
	replicas []string
}

// clustersSQL reads a cluster's replicas (bound: the cluster's name).
const clustersSQL = "SELECT shard_num, replica_num, host_name, port FROM system.clusters WHERE cluster = ? ORDER BY shard_num, replica_num"

// ensureCluster finds the mapping's cluster on the server and makes every
// query of t ask for quorum inserts and sequentially consistent reads
// (quorumConn); without a cluster it leaves (or makes) t a plain
// connection. A cluster the server does not know, or of more than one
// shard, is a configuration error.
func (t *Server) ensureCluster(ctx context.Context) error {
	raw := t.conn
	if q, ok := raw.(*quorumConn); ok {
		raw = q.Conn
	}
	name := ""
	if t.M != nil {
		name = t.M.Target.Cluster
	}
	if name == "" {
		t.conn, t.cl = raw, nil
		return nil
	}
	if t.cl != nil && t.cl.name == name {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	rows, err := raw.Query(cctx, clustersSQL, name)
	if err != nil {
		return classify(fmt.Errorf("read the cluster %s from system.clusters: %w", name, err))
	}
	defer rows.Close()
	info := &clusterInfo{name: name}
	shards := map[uint32]bool{}
	for rows.Next() {
		var shard, replica uint32
		var host string
		var port uint16
		if err := rows.Scan(&shard, &replica, &host, &port); err != nil {
			return classify(fmt.Errorf("read the cluster %s from system.clusters: %w", name, err))
		}
		shards[shard] = true
		info.replicas = append(info.replicas, net.JoinHostPort(host, strconv.Itoa(int(port))))
	}
	if err := rows.Err(); err != nil {
		return classify(fmt.Errorf("read the cluster %s from system.clusters: %w", name, err))
	}
	switch {
	case len(info.replicas) == 0:
		return outcome.Config.Mark(fmt.Errorf("%w: %w: target.cluster is %q, which the remote_servers of ClickHouse %s do not list",
			change.ErrConfig, ErrNoCluster, name, t.Version))
	case len(shards) > 1:
		return outcome.Config.Mark(fmt.Errorf("%w: %w: cluster %s has %d shards (%d replicas); a target is the replicated table of one shard",
			change.ErrConfig, ErrClusterShards, name, len(shards), len(info.replicas)))
	}
	t.cl = info
	t.conn = &quorumConn{Conn: raw, quorum: len(info.replicas)}
	return nil
}

// activeSQL reads how many replicas of a Replicated table ZooKeeper holds
// and how many of them have a live session (bound: database, table).
const activeSQL = "SELECT total_replicas, active_replicas FROM system.replicas WHERE database = ? AND table = ?"

// checkActive fails, transient, when a replica of the target table has no
// live ZooKeeper session (a replica down, or frozen past its session
// timeout): every write would wait for it until the call timeout. A table
// that is not Replicated (or not there) is left to the schema check.
func (t *Server) checkActive(ctx context.Context) error {
	if t.cl == nil {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	var total, active uint8
	name := mapping.Qualified(t.M.Target.Database, t.M.Target.Table)
	err := t.conn.QueryRow(cctx, activeSQL, t.M.Target.Database, t.M.Target.Table).Scan(&total, &active)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return classify(fmt.Errorf("read the replicas of %s: %w", name, err))
	case active < total:
		return outcome.Transient.Mark(fmt.Errorf("%w: %d of the %d replicas of %s are active in ZooKeeper; every write waits for all of them",
			ErrReplicaUnavailable, active, total, name))
	}
	return nil
}

// pingReplicas connects to every replica of the cluster: setup's ON
// CLUSTER statements would otherwise wait for one that is away until the
// call timeout. One that does not answer is transient.
func (t *Server) pingReplicas(ctx context.Context) error {
	if t.cl == nil {
		return nil
	}
	for _, addr := range t.cl.replicas {
		conn, err := t.openReplica(ctx, addr)
		if err != nil {
			return err
		}
		conn.Close()
	}
	return nil
}

// checkReplicated refuses a target table whose engine does not fit the
// mapping: a Replicated table without target.cluster (its reads could come
// from a replica that lags, its writes would not wait for the others), or
// a plain one with it.
func (t *Server) checkReplicated(name, engine string) error {
	replicated := strings.HasPrefix(engine, "Replicated")
	switch {
	case t.cl == nil && replicated:
		return outcome.Config.Mark(fmt.Errorf("%w: %s is a %s: set target.cluster in the mapping to the cluster it is replicated on",
			ErrClusterNotNamed, name, engine))
	case t.cl != nil && !replicated:
		return outcome.Config.Mark(fmt.Errorf("%w: %s is a %s, not a Replicated table, on cluster %s",
			ErrNotReplicated, name, engine, t.cl.name))
	}
	return nil
}

// quorumConn is a connection whose every query asks for the cluster's
// guarantees: an INSERT into a Replicated table returns once quorum
// replicas hold the part (insert_quorum; the server waits at most until
// the call's deadline, insert_quorum_timeout), and a SELECT of one reads
// only parts every replica acknowledged, failing on a replica that lacks
// one (select_sequential_consistency). Other tables ignore both.
type quorumConn struct {
	driver.Conn
	quorum int
}

// defaultQuorumWait is insert_quorum_timeout for a call without deadline.
const defaultQuorumWait = time.Minute

func (c *quorumConn) with(ctx context.Context) context.Context {
	// The server gives up a little before the client does, so that the
	// run hears why (UNKNOWN_STATUS_OF_INSERT) rather than a timeout.
	wait := defaultQuorumWait
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		wait = max(left-min(left/10, 2*time.Second), time.Millisecond)
	}
	// ints: ClickHouse before 19.x takes settings as unsigned numbers
	// only (checkURLSettings), and clickhouse-go sends an int as one.
	sequential := 1
	if ctx.Value(plainReadKey{}) != nil {
		sequential = 0
	}
	return clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{
		"insert_quorum":                 c.quorum,
		"insert_quorum_timeout":         int(wait.Milliseconds()),
		"select_sequential_consistency": sequential,
	}))
}

// plainReadKey marks a context whose reads are plain, without sequential
// consistency (plainRead).
type plainReadKey struct{}

// plainRead is ctx for a read of the lock's rows, which every run writes
// with quorum inserts of every replica, several runs at once. ClickHouse
// 18.16 reads, under sequential consistency, the parts up to the block of
// the quorum insert that completed last, and block numbers are taken
// before that commit: of two racing quorum inserts, the one with the lower
// block may complete last and hide the other, acknowledged on every
// replica, until the next one. A plain read right after a run's own
// acknowledged insert sees every acknowledged row (every replica holds
// it), and also rows not acknowledged yet, which only make a claimant wait.
func plainRead(ctx context.Context) context.Context {
	return context.WithValue(ctx, plainReadKey{}, true)
}

func (c *quorumConn) Query(ctx context.Context, query string, args ...any) (driver.Rows, error) {
	return c.Conn.Query(c.with(ctx), query, args...)
}

func (c *quorumConn) QueryRow(ctx context.Context, query string, args ...any) driver.Row {
	return c.Conn.QueryRow(c.with(ctx), query, args...)
}

func (c *quorumConn) Select(ctx context.Context, dest any, query string, args ...any) error {
	return c.Conn.Select(c.with(ctx), dest, query, args...)
}

func (c *quorumConn) Exec(ctx context.Context, query string, args ...any) error {
	return c.Conn.Exec(c.with(ctx), query, args...)
}

func (c *quorumConn) PrepareBatch(ctx context.Context, query string, opts ...driver.PrepareBatchOption) (driver.Batch, error) {
	return c.Conn.PrepareBatch(c.with(ctx), query, opts...)
}

// retryQuorum runs write, and again while ClickHouse refuses it because
// the previous quorum insert into the table is not complete (a replica
// still fetching it: UNSATISFIED_QUORUM_FOR_PREVIOUS_WRITE, which ClickHouse
// checks before it commits anything), for up to the call timeout. Before
// each retry, settled (when not nil) says whether the write is no longer
// needed (settledDone), no longer right (err), or already on its way
// (settledPending: the previous insert is this write's row, which an
// earlier run recorded and whose insert failed UNKNOWN_STATUS_OF_INSERT:
// writing it again would record it twice, so it waits for that one to
// complete). On one server it runs write once.
func (t *Server) retryQuorum(ctx context.Context, write func() error, settled func() (settleState, error)) error {
	if t.cl == nil {
		return write()
	}
	until := time.Now().Add(t.timeout)
	err := write()
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		if err == nil || chCode(err) != chUnsatisfiedQuorum || time.Now().After(until) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		state := settledAgain
		if settled != nil {
			var serr error
			if state, serr = settled(); serr != nil {
				return serr
			}
		}
		switch state {
		case settledDone:
			return nil
		case settledAgain:
			err = write()
		}
	}
}

// settleState is what retryQuorum's settled found.
type settleState int

const (
	settledAgain   settleState = iota // write again
	settledDone                       // the row is in: nothing to write
	settledPending                    // the row is on its way: wait, do not write
)

// ledgerSettled is retryQuorum's settled for the ledger row e after prev:
// a row of the same batch right after prev acknowledged meanwhile (a run
// before this one recorded it, its insert failed UNKNOWN_STATUS_OF_INSERT
// and its quorum completed now): done; such a row on this replica but not
// acknowledged yet: pending (the quorum this write waits for is that
// row's); another row after prev: the ledger moved under this run,
// transient (the re-run reads it and replays).
func (t *Table) ledgerSettled(ctx context.Context, prev, e *change.LedgerEntry) func() (settleState, error) {
	return func() (settleState, error) {
		var prevSeq uint64
		if prev != nil {
			prevSeq = prev.Seq
		}
		st, err := t.readLedger(ctx, "")
		if err != nil {
			return settledAgain, err
		}
		switch {
		case st.Last == nil || st.Last.Seq == prevSeq:
			if t.ledgerRowHere(ctx, prevSeq+1, e) {
				return settledPending, nil
			}
			return settledAgain, nil
		case st.Last.Seq == prevSeq+1 && st.Last.Digest == e.Digest && st.Last.Kind == e.Kind:
			return settledDone, nil
		}
		name := mapping.Qualified(t.M.Target.Database, mapping.LedgerName(t.M))
		// Another run's row: an earlier holder's insert that completed
		// late, or a run that took the lock: the re-run reads it.
		return settledAgain, outcome.Transient.Mark(fmt.Errorf("%w: %w: the ledger %s gained row %d (%s) of another run while this run waited to record row %d",
			change.ErrTargetLocked, ErrClusterLocked, name, st.Last.Seq, st.Last.Digest, prevSeq+1))
	}
}

// ledgerRowHere says whether this replica holds a row of seq that records
// e's batch, acknowledged or not (a plain read). A failed read says no:
// the caller then writes again, as it would without it.
func (t *Table) ledgerRowHere(ctx context.Context, seq uint64, e *change.LedgerEntry) bool {
	cctx, cancel := context.WithTimeout(plainRead(ctx), t.timeout)
	defer cancel()
	var n uint64
	err := t.conn.QueryRow(cctx, "SELECT count() FROM "+t.ledger().name()+" WHERE seq = ? AND digest = ? AND kind = ?",
		seq, e.Digest, e.Kind).Scan(&n)
	return err == nil && n > 0
}

// ClickHouse error codes of replicated tables and ZooKeeper.
const (
	chBadGet                  = 170 // ON CLUSTER of a cluster the server does not know
	chNoZooKeeper             = 225
	chTooFewLiveReplicas      = 285
	chUnsatisfiedQuorum       = 286 // the previous quorum insert is not complete
	chReplicaNotInQuorum      = 289
	chUnknownStatusOfInsert   = 319 // the quorum was not reached in time: the part may be on some replicas
	chKeeperException         = 999
	chTableIsReadOnlyReplicas = chTableIsReadOnly // a Replicated table without its ZooKeeper session
)

// classifyCluster marks the errors of replicated tables: a replica or
// ZooKeeper that did not take part is transient (ErrReplicaUnavailable), a
// server without ZooKeeper or without the cluster a configuration error.
func classifyCluster(err error, code int32) (error, bool) {
	switch code {
	case chTooFewLiveReplicas, chUnsatisfiedQuorum, chReplicaNotInQuorum, chUnknownStatusOfInsert, chKeeperException,
		chTableIsReadOnlyReplicas:
		return outcome.Transient.Mark(fmt.Errorf("%w (%w)", err, ErrReplicaUnavailable)), true
	case chNoZooKeeper:
		return outcome.Config.Mark(fmt.Errorf("%w (%w)", err, ErrNoZooKeeper)), true
	case chBadGet:
		if strings.Contains(err.Error(), "ON CLUSTER") {
			return outcome.Config.Mark(fmt.Errorf("%w (%w)", err, ErrNoCluster)), true
		}
	}
	return nil, false
}

// ddl returns the DDL statement sql for the target's cluster: ON CLUSTER
// after the name of the object it creates or drops (the target's table,
// live view, ledger or lock, or its database), and a Replicated engine
// instead of a ReplacingMergeTree or MergeTree, at the object's
// zooKeeperPath. Without a cluster it returns sql unchanged.
func (t *Server) ddl(sql string) string {
	if t.cl == nil {
		return sql
	}
	return clusterDDL(t.M, t.cl.name, sql)
}

// clusterDDL is ddl for the cluster named cluster.
func clusterDDL(m *mapping.Mapping, cluster, sql string) string {
	on := " ON CLUSTER " + mapping.QuoteIdent(cluster)
	if strings.HasPrefix(sql, "CREATE DATABASE ") {
		return sql + on
	}
	db := m.Target.Database
	for _, name := range []string{m.Target.Table, m.Target.LiveView, mapping.LedgerName(m), mapping.LockName(m)} {
		q := mapping.Qualified(db, name)
		for _, verb := range []string{"CREATE TABLE IF NOT EXISTS ", "CREATE VIEW IF NOT EXISTS ", "DROP TABLE IF EXISTS "} {
			if !strings.HasPrefix(sql, verb+q+" ") && sql != verb+q {
				continue
			}
			out := verb + q + on + sql[len(verb+q):]
			path := quoteString(zooKeeperPath(db, name)) + ", '{replica}'"
			out = strings.Replace(out, "ENGINE = ReplacingMergeTree(", "ENGINE = ReplicatedReplacingMergeTree("+path+", ", 1)
			return strings.Replace(out, "ENGINE = MergeTree", "ENGINE = ReplicatedMergeTree("+path+")", 1)
		}
	}
	return sql
}

// clusterSetupSQL is what setup creates on a cluster besides the target,
// its view and its ledger: the lock table (clusterlock.go).
func (t *Server) clusterSetupSQL() []string {
	if t.cl == nil {
		return nil
	}
	return []string{t.ddl(createClusterLockSQL(t.M))}
}

// replicaShape is what checkReplicas compares across the replicas: for
// each of the target's tables, its engine (with its ZooKeeper path) and its
// columns in order.
type replicaShape map[string]string

// checkReplicas checks the target, its live view, its ledger and its lock
// on every replica of the cluster, each through its own connection (the
// address system.clusters gives, CLICKHOUSE_URL's credentials and TLS): as
// the mapping wants them (CheckSchema, checkView, checkLedger), and the
// same on every replica. A replica that cannot be reached is transient.
func (t *Server) checkReplicas(ctx context.Context) error {
	if t.cl == nil {
		return nil
	}
	var first replicaShape
	var firstAt string
	for _, addr := range t.cl.replicas {
		shape, err := t.replicaShape(ctx, addr)
		if err != nil {
			if outcome.Classify(err) == outcome.Transient {
				return fmt.Errorf("check replica %s of cluster %s: %w", addr, t.cl.name, err)
			}
			return outcome.Config.Mark(fmt.Errorf("%w: replica %s of cluster %s: %w", ErrReplicasDisagree, addr, t.cl.name, err))
		}
		if first == nil {
			first, firstAt = shape, addr
			continue
		}
		for _, obj := range []string{t.M.Target.Table, t.M.Target.LiveView, mapping.LedgerName(t.M), mapping.LockName(t.M)} {
			if shape[obj] != first[obj] {
				return outcome.Config.Mark(fmt.Errorf("%w: %s on replica %s is %s; on replica %s it is %s", ErrReplicasDisagree,
					mapping.Qualified(t.M.Target.Database, obj), addr, shape[obj], firstAt, first[obj]))
			}
		}
	}
	return nil
}

// replicaShape connects to the replica at addr and checks the target's
// objects there as setup checks them on the server it is connected to.
func (t *Server) replicaShape(ctx context.Context, addr string) (replicaShape, error) {
	conn, err := t.openReplica(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	// The replica's own view of the target, with the cluster's settings
	// (the read of system.clusters is not repeated: r.cl is set).
	r := t.With(t.M)
	r.conn = &quorumConn{Conn: conn, quorum: len(t.cl.replicas)}
	if _, err := r.CheckSchema(ctx); err != nil {
		return nil, err
	}
	if err := r.checkView(ctx); err != nil {
		return nil, err
	}
	if err := r.checkLedger(ctx); err != nil {
		return nil, err
	}
	if err := r.checkClusterLock(ctx); err != nil {
		return nil, err
	}
	shape := replicaShape{}
	for _, obj := range []string{t.M.Target.Table, t.M.Target.LiveView, mapping.LedgerName(t.M), mapping.LockName(t.M)} {
		o, err := r.inspect(ctx, obj)
		if err != nil {
			return nil, err
		}
		cols := make([]string, len(o.cols))
		for i, c := range o.cols {
			cols[i] = c.name + " " + c.typ
		}
		shape[obj] = fmt.Sprintf("%s (%s)", o.engineFull, strings.Join(cols, ", "))
		if o.engine == "View" {
			shape[obj] = fmt.Sprintf("a view (%s)", strings.Join(cols, ", "))
		}
	}
	return shape, nil
}

// replicaObjectsSQL reads the engines of the target's objects on one
// replica (bound: the database, then the target, its view, ledger and
// lock).
const replicaObjectsSQL = "SELECT name, engine, engine_full FROM system.tables WHERE database = ? AND name IN (?, ?, ?, ?)"

// CheckReplicaObjects checks, before a run takes the lock or reads
// anything, that every replica of the cluster holds the target, its live
// view, its ledger and its lock, each through a connection of its own,
// at once: the view a view, the three tables Replicated tables at one
// ZooKeeper path. A replica that lacks one is refused (ErrReplicaLacks):
// a run through it would make it anew (the ledger: a new replica of the
// existing path, empty until it fetches, where the run would append a
// second row of a seq) or miss it (the view, for its readers). A replica
// whose table is not Replicated, or at another path, would refuse every
// quorum insert (TOO_FEW_LIVE_REPLICAS), which says "retry" for ever:
// refused too (ErrReplicasDisagree). Both are configuration errors that
// cdc setup repairs (the odd table dropped first); a replica that does
// not answer is transient. On one server it does nothing.
func (t *Server) CheckReplicaObjects(ctx context.Context) error {
	if err := t.ensureCluster(ctx); err != nil || t.cl == nil {
		return err
	}
	found := make([]map[string]tableInfo, len(t.cl.replicas))
	errs := make([]error, len(t.cl.replicas))
	var wg sync.WaitGroup
	for i, addr := range t.cl.replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			found[i], errs[i] = t.replicaObjects(ctx, addr)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("check replica %s of cluster %s: %w", t.cl.replicas[i], t.cl.name, err)
		}
	}
	m := t.M
	for _, obj := range []string{m.Target.Table, mapping.LedgerName(m), mapping.LockName(m), m.Target.LiveView} {
		if err := t.sameOnReplicas(obj, found); err != nil {
			return err
		}
	}
	return nil
}

// sameOnReplicas checks the object obj as CheckReplicaObjects read it on
// each replica (found). What every replica lacks or holds alike in the
// wrong form is left to the checks of one server (CheckSchema, the view's,
// the ledger's: "run cdc setup first", "not replicated").
func (t *Server) sameOnReplicas(obj string, found []map[string]tableInfo) error {
	name := mapping.Qualified(t.M.Target.Database, obj)
	// kind is what a replica's object should be: a view, or Replicated.
	kind := func(e string) bool { return strings.HasPrefix(e, "Replicated") }
	what := "a Replicated table"
	if obj == t.M.Target.LiveView {
		kind, what = func(e string) bool { return e == "View" }, "a view"
	}
	var missing, odd []int
	for i := range t.cl.replicas {
		info, ok := found[i][obj]
		switch {
		case !ok:
			missing = append(missing, i)
		case !kind(info.engine):
			odd = append(odd, i)
		}
	}
	n := len(t.cl.replicas)
	switch {
	case len(missing) == n, len(odd) == n:
		return nil
	case len(missing) > 0:
		return outcome.Config.Mark(fmt.Errorf("%w: replica %s of cluster %s has no %s", ErrReplicaLacks, t.cl.replicas[missing[0]], t.cl.name, name))
	case len(odd) > 0:
		i := odd[0]
		return outcome.Config.Mark(fmt.Errorf("%w: %s on replica %s is a %s, not %s", ErrReplicasDisagree, name, t.cl.replicas[i], found[i][obj].engine, what))
	case obj == t.M.Target.LiveView:
		return nil
	}
	// The path setup gives it, when a replica has it; else (a table made
	// by hand, alike on every replica) the first replica's.
	want := zooKeeperPath(t.M.Target.Database, obj)
	paths := make([]string, n)
	for i := range paths {
		paths[i] = replicatedPath(found[i][obj].engineFull)
	}
	if !slices.Contains(paths, want) {
		want = paths[0]
	}
	for i, addr := range t.cl.replicas {
		if paths[i] != want {
			return outcome.Config.Mark(fmt.Errorf("%w: %s on replica %s is at ZooKeeper path %s, not %s", ErrReplicasDisagree, name, addr, paths[i], want))
		}
	}
	return nil
}

// replicaObjects reads, on the replica at addr, the engines of the
// target's objects it holds, by name.
func (t *Server) replicaObjects(ctx context.Context, addr string) (map[string]tableInfo, error) {
	conn, err := t.openReplica(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	r := t.With(t.M)
	r.conn = conn
	cctx, cancel := context.WithTimeout(ctx, min(t.timeout, 10*time.Second))
	defer cancel()
	m := t.M
	var out map[string]tableInfo
	err = r.systemTables(cctx, "read the target's tables", func() error {
		out = map[string]tableInfo{}
		rows, err := conn.Query(cctx, replicaObjectsSQL, m.Target.Database, m.Target.Table, m.Target.LiveView, mapping.LedgerName(m), mapping.LockName(m))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var name string
			var info tableInfo
			if err := rows.Scan(&name, &info.engine, &info.engineFull); err != nil {
				return err
			}
			out[name] = info
		}
		return rows.Err()
	})
	if err != nil && outcome.Classify(err) == outcome.Transient && !errors.Is(err, ErrReplicaUnavailable) {
		err = outcome.Transient.Mark(fmt.Errorf("%w: %w", ErrReplicaUnavailable, err))
	}
	return out, err
}

// openReplica opens one connection to the replica at addr, on the native
// protocol, with CLICKHOUSE_URL's credentials and TLS settings, and pings it: one that
// does not answer is transient (ErrReplicaUnavailable).
func (t *Server) openReplica(ctx context.Context, addr string) (driver.Conn, error) {
	opts := *t.opts
	opts.Addr = []string{addr}
	// system.clusters gives the native port, whatever CLICKHOUSE_URL speaks.
	opts.Protocol = clickhouse.Native
	opts.MaxOpenConns = 1
	opts.DialTimeout = min(opts.DialTimeout, 10*time.Second)
	conn, err := clickhouse.Open(&opts)
	if err == nil {
		cctx, cancel := context.WithTimeout(ctx, min(t.timeout, 10*time.Second))
		err = conn.Ping(cctx)
		cancel()
		if err != nil {
			conn.Close()
		}
	}
	if err != nil {
		return nil, outcome.Transient.Mark(fmt.Errorf("%w: replica %s of cluster %s does not answer: %w", ErrReplicaUnavailable, addr, t.cl.name, err))
	}
	return conn, nil
}

// replicatedPath is the ZooKeeper path of a Replicated engine as
// system.tables' engine_full gives it (its first argument, unquoted), or
// "" when engineFull names none.
func replicatedPath(engineFull string) string {
	_, args, ok := strings.Cut(engineFull, "('")
	if !ok {
		return ""
	}
	var b strings.Builder
	for i := 0; i < len(args); i++ {
		switch c := args[i]; {
		case c == '\\' && i+1 < len(args):
			i++
			b.WriteByte(args[i])
		case c == '\'':
			return b.String()
		default:
			b.WriteByte(c)
		}
	}
	return ""
}
