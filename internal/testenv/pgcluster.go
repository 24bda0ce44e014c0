package testenv

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// pgBin is where Debian's PostgreSQL 15 server binaries are (.ci/postgres
// installs them).
const pgBin = "/usr/lib/postgresql/15/bin"

// PGCluster is a PostgreSQL 15 cluster of a test's own (PrivatePostgres).
type PGCluster struct {
	// Admin is the DSN of the cluster's superuser changesink on database
	// postgres (trust authentication, 127.0.0.1).
	Admin string
	// Port is the port it listens on.
	Port int
	data string
}

// PrivatePostgres starts a PostgreSQL 15 cluster of the test's own, with
// the settings given (postgresql.conf lines) and 1 MB WAL segments, for
// what cannot be done on the shared server: a restart, a slot invalidated
// by max_slot_wal_keep_size, a server out of slots or WAL senders,
// wal_level replica. It is stopped and removed when the test ends. It needs
// the test services' environment (CHANGESINK_TEST_PG), as in CI, and the
// server binaries .ci/postgres installs.
func PrivatePostgres(t testing.TB, settings ...string) *PGCluster {
	t.Helper()
	Lookup(t, "CHANGESINK_TEST_PG")
	if _, err := os.Stat(filepath.Join(pgBin, "initdb")); err != nil {
		Missing(t, pgBin+"/initdb not found", "run .ci/postgres, which installs PostgreSQL 15")
	}
	// Not t.TempDir: its parent is private to this user, where the
	// postgres user could not reach the data directory.
	dir, err := os.MkdirTemp("", "changesink-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if os.Geteuid() == 0 {
		pg, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root, and no postgres user to run a cluster as: %v", err)
		}
		uid, _ := strconv.Atoi(pg.Uid)
		if err := os.Chown(dir, uid, -1); err != nil {
			t.Fatal(err)
		}
	}
	c := &PGCluster{data: filepath.Join(dir, "data")}
	c.pgCtl(t, "initdb", "-D", c.data, "-U", "changesink", "--auth=trust", "--wal-segsize=1", "--no-sync")
	l, err := net.Listen("tcp", "127.0.0.1:0") // a free port (another process may take it first: then start fails)
	if err != nil {
		t.Fatal(err)
	}
	c.Port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	conf := fmt.Sprintf("port = %d\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\nfsync = off\n"+
		"max_wal_size = 4MB\nmin_wal_size = 2MB\n%s\n", c.Port, dir, strings.Join(settings, "\n"))
	f, err := os.OpenFile(filepath.Join(c.data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(conf); err != nil {
		t.Fatal(err)
	}
	f.Close()
	c.pgCtl(t, "pg_ctl", "-D", c.data, "-l", filepath.Join(dir, "log"), "-w", "start")
	t.Cleanup(func() { c.pgCtl(t, "pg_ctl", "-D", c.data, "-w", "stop", "-m", "immediate") })
	c.Admin = fmt.Sprintf("postgres://changesink@127.0.0.1:%d/postgres?sslmode=disable", c.Port)
	return c
}

// Restart restarts the cluster with pg_ctl's shutdown mode ("fast": every
// session ended, a checkpoint; "immediate": a crash, recovery at the
// start) and waits until it accepts connections again.
func (c *PGCluster) Restart(t testing.TB, mode string) {
	t.Helper()
	c.pgCtl(t, "pg_ctl", "-D", c.data, "-l", filepath.Join(filepath.Dir(c.data), "log"), "-w", "restart", "-m", mode)
}

// pgCtl runs one of the server's programs, as the postgres user when the
// test runs as root (the server refuses to run as root).
func (c *PGCluster) pgCtl(t testing.TB, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(pgBin, name), args...)
	if os.Geteuid() == 0 {
		cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", filepath.Join(pgBin, name)}, args...)...)
	}
	cmd.Dir = "/"
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}
