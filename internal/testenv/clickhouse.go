package testenv

import (
	"context"
	"net/url"
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
