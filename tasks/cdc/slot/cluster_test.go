package slot

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

	"github.com/changesink/changesink/internal/testenv"
	"github.com/jackc/pgx/v5/pgconn"
)

// pgBin is where Debian's PostgreSQL 15 server binaries are (.ci/postgres
// installs them).
const pgBin = "/usr/lib/postgresql/15/bin"

// privateCluster starts a PostgreSQL 15 cluster of the test's own, with
// the settings given (postgresql.conf lines) and 1 MB WAL segments, for
// what cannot be done on the shared server: a slot invalidated by
// max_slot_wal_keep_size, a server out of slots or WAL senders, wal_level
// replica. It is stopped and removed when the test ends. It returns a
// source whose admin DSN is the cluster's superuser on database postgres.
func privateCluster(t *testing.T, settings ...string) *source {
	t.Helper()
	testenv.Lookup(t, "CHANGESINK_TEST_PG") // with the test services, as in CI
	if _, err := os.Stat(filepath.Join(pgBin, "initdb")); err != nil {
		testenv.Missing(t, pgBin+"/initdb not found", "run .ci/postgres, which installs PostgreSQL 15")
	}
	// Not t.TempDir: its parent is private to this user, where the
	// postgres user could not reach the data directory.
	dir, err := os.MkdirTemp("", "changesink-slot-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	run := func(name string, args ...string) {
		t.Helper()
		cmd := exec.Command(filepath.Join(pgBin, name), args...)
		if os.Geteuid() == 0 { // the server refuses to run as root: run it as postgres
			cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", filepath.Join(pgBin, name)}, args...)...)
		}
		cmd.Dir = "/"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
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
	data := filepath.Join(dir, "data")
	run("initdb", "-D", data, "-U", "changesink", "--auth=trust", "--wal-segsize=1", "--no-sync")
	l, err := net.Listen("tcp", "127.0.0.1:0") // a free port (another process may take it first: then start fails)
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	conf := fmt.Sprintf("port = %d\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\nfsync = off\n"+
		"max_wal_size = 4MB\nmin_wal_size = 2MB\n%s\n", port, dir, strings.Join(settings, "\n"))
	f, err := os.OpenFile(filepath.Join(data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(conf); err != nil {
		t.Fatal(err)
	}
	f.Close()
	run("pg_ctl", "-D", data, "-l", filepath.Join(dir, "log"), "-w", "start")
	t.Cleanup(func() { run("pg_ctl", "-D", data, "-w", "stop", "-m", "immediate") })
	admin := fmt.Sprintf("postgres://changesink@127.0.0.1:%d/postgres?sslmode=disable", port)
	pg, err := pgconn.ParseConfig(admin)
	if err != nil {
		t.Fatal(err)
	}
	return &source{t: t, admin: admin, dsn: admin, pg: pg}
}
