// Package testenv gates changesink's integration tests on the services that
// .ci/services starts and .ci/env describes.
//
// An integration test reads its service's address from an env var
// (CHANGESINK_TEST_KAFKA, CHANGESINK_TEST_PG, CHANGESINK_TEST_CLICKHOUSE, ...).
// When one is unset the test skips with a loud message naming it, so that a
// developer without the services still gets the unit tests; .ci/run sets
// CHANGESINK_REQUIRE_SERVICES=1, which turns every such skip into a
// failure, so in CI nothing skips.
//
// It also holds what the integration tests of every package share on those
// services: names no other test, process or checkout uses (UniqueName,
// RandomHex), PostgreSQL databases and roles dropped when the test ends
// (CreateDatabase, CreateRole) and DSNs derived from the admin one
// (WithDatabase, WithParams), Kafka topics deleted when the test ends
// (CreateTopic, WaitForLeaders), a TCP proxy on a port of its own that
// stands for a service going away or hanging (StartProxy), a test server's
// accept loop (Serve), the changesink binary built for tests that run it
// (BuildChangesink, Build), a child process run, or started and killed, with
// its output and exit code or signal (Run, Start, Process.Kill), files read
// or written or the test failed (ReadFile, WriteFile), every value of an
// Ion stream as ion-go reads it (IonValues), the seed flows' task SQL and
// scripts (SeedTask), and the check that an error is of the class, sentinel
// and message a test wants (WantError, CheckError).
package testenv

import (
	"os"
	"strings"
	"testing"
)

// requireServices is the env var that forbids skipping when set to "1".
const requireServices = "CHANGESINK_REQUIRE_SERVICES"

// strict reports whether skipping is forbidden (requireServices=1).
func strict() bool { return os.Getenv(requireServices) == "1" }

// Lookup returns the values of the named env vars. When any is unset the
// test is skipped with a message naming them, or fails under Strict.
func Lookup(t testing.TB, names ...string) map[string]string {
	t.Helper()
	vals := make(map[string]string, len(names))
	var missing []string
	for _, n := range names {
		v := os.Getenv(n)
		if v == "" {
			missing = append(missing, n)
		}
		vals[n] = v
	}
	if len(missing) > 0 {
		Missing(t, strings.Join(missing, ", ")+" unset", "source .ci/env after .ci/services; .ci/run sets them")
	}
	return vals
}

// Missing skips the test loudly because what is absent (why says what to
// do), or fails it under Strict. It does not return.
func Missing(t testing.TB, what, why string) {
	t.Helper()
	msg := "SKIPPED, integration test NOT RUN: " + what + " (" + why + ")"
	if strict() {
		t.Fatal(msg + "; " + requireServices + "=1 forbids skipping")
	}
	t.Skip(msg)
}
