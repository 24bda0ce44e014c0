// Package testenv gates changesink's integration tests on the services that
// .ci/services starts and .ci/env describes, and holds what the tests of
// every package share on them.
//
// An integration test reads its service's address from an env var
// (CHANGESINK_TEST_KAFKA, CHANGESINK_TEST_PG, CHANGESINK_TEST_CLICKHOUSE, ...)
// through Lookup. When one is unset the test skips with a loud message naming
// it, so that a developer without the services still gets the unit tests;
// .ci/run sets CHANGESINK_REQUIRE_SERVICES=1, which turns every such skip into
// a failure, so in CI nothing skips.
//
// What it shares, by file:
//   - names.go: names no other test, process or checkout uses (UniqueName,
//     RandomHex);
//   - postgres.go, clickhouse.go, kafka.go: databases, roles and topics of a
//     test's own, dropped or deleted when it ends, and connection URLs derived
//     with net/url from the admin one (WithDatabase, WithHost, ...);
//   - proxy.go, serve.go, tls.go: a TCP proxy on a port of its own that
//     stands for a service going away, hanging or cutting a connection; test
//     servers and addresses where nothing listens (ServeLocal, ClosedAddr); a
//     test CA and TLS listeners;
//   - build.go, run.go: the changesink binary built for the tests of
//     cmd/changesink and parity, and child processes run, or started and
//     stopped by a signal, with their output and exit code;
//   - seeds.go: the original seed flows, their task SQL and scripts (Seeds,
//     SeedTask), and the repository's root;
//   - files.go, ion.go, wanterror.go: files read or written or the test
//     failed, every value of an Ion stream as ion-go reads it, and the check
//     that an error has the class, sentinel and message a test wants.
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
