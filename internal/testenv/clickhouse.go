package testenv

import (
	"context"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// clickHouseVar names the test ClickHouse's native-protocol URL
// (clickhouse://host:port/default), which .ci/env sets.
const clickHouseVar = "CHANGESINK_TEST_CLICKHOUSE"

// ClickHouseURL returns the test ClickHouse's URL (clickHouseVar), or skips
// the test loudly (fails it under CHANGESINK_REQUIRE_SERVICES=1) when it
// is unset.
func ClickHouseURL(t testing.TB) string {
	t.Helper()
	return Lookup(t, clickHouseVar)[clickHouseVar]
}

// The test ClickHouse is one of several servers: .ci/test runs the packages
// that use it once per server and protocol (18.16 native; 26.9 native and
// HTTP, docs/clickhouse.md), pointing clickHouseVar at each. For a server
// that cannot do what some tests need, it also sets these.
const (
	// clickHouseServerVar names the server under test for messages
	// ("ClickHouse 26.9 (chdb-core stand-in), HTTP"); unset: 18.16.
	clickHouseServerVar = "CHANGESINK_TEST_CLICKHOUSE_SERVER"
	// clickHouseLacksVar lists, space-separated, the ClickHouseFeatures
	// the server under test lacks.
	clickHouseLacksVar = "CHANGESINK_TEST_CLICKHOUSE_LACKS"
)

// A ClickHouseFeature is something of the test ClickHouse that some tests
// need and not every server under test has.
type ClickHouseFeature string

const (
	// ClickHouseTLS: a native TLS port (CHANGESINK_TEST_CLICKHOUSE_SECURE).
	ClickHouseTLS ClickHouseFeature = "tls"
	// ClickHouseUsers: a user with a password and its grants
	// (CHANGESINK_TEST_CLICKHOUSE_USER and _PASSWORD), and users made by
	// the tests.
	ClickHouseUsers ClickHouseFeature = "users"
	// ClickHouseReplicas: the replicated cluster of .ci/clickhouse-cluster
	// (Cluster), two 18.16 replicas.
	ClickHouseReplicas ClickHouseFeature = "cluster"
)

// clickHouseLacking says why a server lacks a feature; every feature
// clickHouseLacksVar may list has a line here.
var clickHouseLacking = map[ClickHouseFeature]string{
	ClickHouseTLS:   "it opens no TLS listener (chdb's LocalServer listens with SYSTEM START LISTEN TCP and HTTP only)",
	ClickHouseUsers: "it has only the user default, without a password (clickhouse-local has no users.xml and no access storage)",
	ClickHouseReplicas: "the test cluster is two 18.16 replicas (.ci/clickhouse-cluster): the cluster tests run once, in the 18.16 run, " +
		"not again beside another server",
}

// ClickHouseHas skips the test, without failing it even under
// CHANGESINK_REQUIRE_SERVICES=1, when the ClickHouse under test lacks f
// (clickHouseLacksVar): the test runs against the other servers, and the
// message names this one and why it cannot. A feature it does not know
// fails the test.
func ClickHouseHas(t testing.TB, f ClickHouseFeature) {
	t.Helper()
	for _, lacks := range strings.Fields(os.Getenv(clickHouseLacksVar)) {
		why, known := clickHouseLacking[ClickHouseFeature(lacks)]
		if !known {
			t.Fatalf("%s lists %q, which testenv does not know (known: tls, users, cluster)", clickHouseLacksVar, lacks)
		}
		if ClickHouseFeature(lacks) == f {
			t.Skipf("SKIPPED for this server only: %s needs %s, which %s lacks: %s (docs/clickhouse.md)",
				t.Name(), f, ClickHouseServer(), why)
		}
	}
}

// ClickHouseServer names the ClickHouse under test, for messages.
func ClickHouseServer() string {
	if s := os.Getenv(clickHouseServerVar); s != "" {
		return s
	}
	return "ClickHouse 18.16 (.ci/clickhouse)"
}

// OpenClickHouse opens a connection to the ClickHouse server at dsn (a
// clickhouse-go DSN), for a test's setup and checks; it is closed when the
// test ends, after the cleanups registered later (a database dropped
// through it, say).
func OpenClickHouse(t testing.TB, dsn string) driver.Conn {
	t.Helper()
	opts, err := clickhouse.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("not a clickhouse-go DSN: %v", err)
	}
	conn, err := clickhouse.Open(opts)
	if err != nil {
		t.Fatalf("open the test ClickHouse: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// CreateClickHouseDatabase creates a database of the test's own on the
// ClickHouse server at serverURL, named by UniqueName(t, prefix), and drops
// it when the test ends (a failed drop is logged: the test's own result
// stands). It returns the name and serverURL pointed at the database
// (user, password, host and settings kept).
func CreateClickHouseDatabase(t testing.TB, serverURL, prefix string) (name, dbURL string) {
	t.Helper()
	name = UniqueName(t, prefix)
	dbURL = clickHouseWithDatabase(t, serverURL, name)
	conn := OpenClickHouse(t, serverURL)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create the test database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
			t.Logf("drop the test database %s: %v", name, err)
		}
	})
	return name, dbURL
}

// clickHouseWithDatabase returns the clickhouse-go DSN dsn with its
// database (the URL's path) replaced by name.
func clickHouseWithDatabase(t testing.TB, dsn, name string) string {
	t.Helper()
	if _, err := clickhouse.ParseDSN(dsn); err != nil {
		t.Fatalf("not a clickhouse-go DSN: %v", err)
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("not a URL: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}
