package target

import (
	"errors"
	"fmt"
)

// Causes of the failures the target reports, each with a remedy of its own
// (cdc.Hint): classify and connect wrap the driver's error with one of
// them, so the message says what happened and the hint what to do.
var (
	// ErrBadURL: CLICKHOUSE_URL is not a clickhouse-go DSN, or names with
	// clickhouse:// an address that does not speak the native protocol.
	ErrBadURL = errors.New("CLICKHOUSE_URL does not reach ClickHouse's native protocol")
	// ErrHTTPTooOld: CLICKHOUSE_URL names the HTTP interface of a server
	// too old for clickhouse-go's HTTP client (ErrBadURL's narrower cause).
	ErrHTTPTooOld = fmt.Errorf("%w: the server is too old for clickhouse-go's HTTP client", ErrBadURL)
	// ErrCredentials: the server refused the user or the password.
	ErrCredentials = errors.New("ClickHouse refused the user or password")
	// ErrNotAllowed: the user may not read or write the target (grants, or
	// a readonly setting).
	ErrNotAllowed = errors.New("the ClickHouse user may not do this here")
	// ErrUnknownSetting: CLICKHOUSE_URL's query string sets a setting the
	// server does not know.
	ErrUnknownSetting = errors.New("a setting the server does not know")
	// ErrNotSetUp: the target table, its view or its database is missing.
	ErrNotSetUp = errors.New("the target is not set up")
	// ErrMemory: the server ran out of memory for the statement
	// (transient: a retry converges once it has memory to spare).
	ErrMemory = errors.New("ClickHouse ran out of memory for this statement")
	// ErrTLS: the TLS handshake failed (a port, host name or CA problem).
	ErrTLS = errors.New("the TLS handshake with ClickHouse failed")
	// ErrUnreachable: the server was unreachable, too slow or dropped the
	// connection (transient).
	ErrUnreachable = errors.New("ClickHouse was unreachable, too slow or dropped the connection")
	// ErrTablesRace: ClickHouse 18.16 failed to list a database's tables
	// while others were renamed or dropped (transient).
	ErrTablesRace = errors.New("ClickHouse failed to list the tables while others were renamed or dropped")
	// ErrLedgerDropped: the ledger was dropped during the run, after the
	// batch was inserted and verified (transient: a re-run records it).
	ErrLedgerDropped = errors.New("the ledger was dropped during this run: the batch is in the target and verified, not recorded")
	// ErrLedgerSeq: the ledger holds two rows of one sequence number, which
	// a holder whose lock was broken wrote before writes were fenced
	// (fence.go): which batch is the last one is undefined.
	ErrLedgerSeq = errors.New("the ledger holds two rows of one sequence number")
)

// Causes of the failures of a target on a cluster (target.cluster in the
// mapping; cluster.go, clusterlock.go).
var (
	// ErrNoCluster: the server's remote_servers has no cluster of the
	// mapping's name.
	ErrNoCluster = errors.New("ClickHouse knows no cluster of that name")
	// ErrClusterShards: the cluster has more than one shard; a target is
	// one shard's replicated table.
	ErrClusterShards = errors.New("the cluster has more than one shard")
	// ErrNotReplicated: the mapping names a cluster, but the target table
	// is not a Replicated table (each replica would hold other rows).
	ErrNotReplicated = errors.New("the target is not replicated across its cluster")
	// ErrClusterNotNamed: the target is a Replicated table, but the
	// mapping names no cluster: writes would not wait for the replicas,
	// and reads could come from one that lags.
	ErrClusterNotNamed = errors.New("the target is replicated, but the mapping names no cluster")
	// ErrReplicasDisagree: the replicas hold different tables (columns,
	// engine or ZooKeeper path) for the target, its view, ledger or lock.
	ErrReplicasDisagree = errors.New("the replicas of the target disagree")
	// ErrReplicaLacks: a replica of the cluster lacks the target, its live
	// view, its ledger or its lock, which the others hold: a run that read
	// or wrote through it would make or miss what the others hold (cdc
	// setup makes it again ON CLUSTER).
	ErrReplicaLacks = errors.New("a replica of the cluster lacks an object of the target")
	// ErrReplicaUnavailable: a replica of the shard or ZooKeeper did not
	// take part in a write or a read (transient: a re-run converges once
	// it is back).
	ErrReplicaUnavailable = errors.New("a replica or ZooKeeper is unavailable")
	// ErrNoZooKeeper: the server has no ZooKeeper in its configuration,
	// so it cannot hold Replicated tables.
	ErrNoZooKeeper = errors.New("the ClickHouse server has no ZooKeeper configured")
	// ErrClusterLocked: another run holds the lock of a target on a
	// cluster (narrows change.ErrTargetLocked).
	ErrClusterLocked = errors.New("another run holds the cluster lock of the target")
)
