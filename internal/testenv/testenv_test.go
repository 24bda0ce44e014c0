package testenv

import (
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestLookup(t *testing.T) {
	t.Setenv("CHANGESINK_TESTENV_A", "a")
	got := Lookup(t, "CHANGESINK_TESTENV_A")
	if got["CHANGESINK_TESTENV_A"] != "a" {
		t.Fatalf("Lookup = %v", got)
	}
}

func TestMissingSkipsOrFails(t *testing.T) {
	for _, strict := range []bool{false, true} {
		rec := &recorder{}
		t.Setenv(requireServices, map[bool]string{false: "", true: "1"}[strict])
		func() {
			defer func() { _ = recover() }() // recorder panics to stop like Skip/Fatal do
			Lookup(rec, "CHANGESINK_TESTENV_UNSET_X")
		}()
		if rec.skipped == strict || rec.failed != strict {
			t.Errorf("strict=%v: skipped=%v failed=%v", strict, rec.skipped, rec.failed)
		}
	}
}

// recorder is a testing.TB that records Skip and Fatal instead of acting.
type recorder struct {
	testing.TB
	skipped, failed bool
}

func (r *recorder) Helper()                           {}
func (r *recorder) Name() string                      { return "TestRecorded" }
func (r *recorder) Skip(args ...any)                  { r.skipped = true; panic("skip") }
func (r *recorder) Skipf(format string, args ...any)  { r.skipped = true; panic("skip") }
func (r *recorder) Fatal(args ...any)                 { r.failed = true; panic("fatal") }
func (r *recorder) Fatalf(format string, args ...any) { r.failed = true; panic("fatal") }

// TestClickHouseHas: a feature the server under test lacks skips, also
// under CHANGESINK_REQUIRE_SERVICES=1 (the other servers run the test); one
// it has runs; a feature testenv does not know fails.
func TestClickHouseHas(t *testing.T) {
	t.Setenv(requireServices, "1")
	for _, tc := range []struct {
		name, lacks          string
		f                    ClickHouseFeature
		wantSkip, wantFailed bool
	}{
		{"18.16 has TLS", "", ClickHouseTLS, false, false},
		{"26.9 stand-in lacks TLS", "tls users", ClickHouseTLS, true, false},
		{"26.9 stand-in lacks users", "tls users", ClickHouseUsers, true, false},
		{"lacks only TLS, has users", "tls", ClickHouseUsers, false, false},
		{"an unknown feature listed", "replicas", ClickHouseTLS, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(clickHouseLacksVar, tc.lacks)
			rec := &recorder{}
			func() {
				defer func() { _ = recover() }()
				ClickHouseHas(rec, tc.f)
			}()
			if rec.skipped != tc.wantSkip || rec.failed != tc.wantFailed {
				t.Errorf("skipped=%v failed=%v, want %v %v", rec.skipped, rec.failed, tc.wantSkip, tc.wantFailed)
			}
		})
	}
}

func TestUniqueName(t *testing.T) {
	a, b := UniqueName(t, "ks_"), UniqueName(t, "ks_")
	if a == b {
		t.Fatalf("two calls gave %q", a)
	}
	if !regexp.MustCompile(`^ks_testuniquename_[0-9a-f]{8}$`).MatchString(a) {
		t.Errorf("UniqueName = %q, want ks_testuniquename_<8 hex>", a)
	}
	t.Run("a/Long Sub-test name with spaces that goes on and on and on", func(t *testing.T) {
		if n := UniqueName(t, "p_"); len(n) > len("p_")+50 || strings.ContainsAny(n, " /-") {
			t.Errorf("UniqueName = %q: too long or not a plain identifier", n)
		}
	})
}

func TestDSNs(t *testing.T) {
	admin := "postgres://u:p%40w@127.0.0.1:5432/admin?sslmode=disable"
	if got, want := WithDatabase(t, admin, "other"), "postgres://u:p%40w@127.0.0.1:5432/other?sslmode=disable"; got != want {
		t.Errorf("WithDatabase = %q, want %q", got, want)
	}
	if got, want := WithHost(t, admin, "127.0.0.1:40001"), "postgres://u:p%40w@127.0.0.1:40001/admin?sslmode=disable"; got != want {
		t.Errorf("WithHost = %q, want %q", got, want)
	}
	if got, want := WithUser(t, admin, "role"), "postgres://role@127.0.0.1:5432/admin?sslmode=disable"; got != want {
		t.Errorf("WithUser = %q, want %q", got, want)
	}
	got := WithParams(t, admin, map[string]string{"sslmode": "verify-full", "sslrootcert": "/ca.pem"})
	if want := "postgres://u:p%40w@127.0.0.1:5432/admin?sslmode=verify-full&sslrootcert=%2Fca.pem"; got != want {
		t.Errorf("WithParams = %q, want %q", got, want)
	}
}

// TestProxy: bytes pass both ways; CutOn closes the proxy before the bytes
// reach the server, and no new connection is accepted after it.
func TestProxy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 4)
	Serve(t, ln, func(c net.Conn) {
		defer c.Close()
		buf := make([]byte, 64)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			got <- string(buf[:n])
			_, _ = c.Write(buf[:n]) // echo
		}
	})
	p := StartProxy(t, ln.Addr().String(), ProxyOptions{})
	if p.Addr() == ln.Addr().String() {
		t.Fatal("the proxy has the server's address")
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	echo := make([]byte, 5)
	if _, err := io.ReadFull(c, echo); err != nil || string(echo) != "hello" || <-got != "hello" {
		t.Fatalf("echo %q (%v)", echo, err)
	}
	p.CutOn([]byte("INSERT"))
	if _, err := c.Write([]byte("INSERT INTO t")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(echo); err == nil {
		t.Error("the connection stayed open after CutOn's bytes")
	}
	<-p.Done()
	select {
	case s := <-got:
		t.Errorf("the server received %q after the cut", s)
	default:
	}
	if c2, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		c2.Close()
		t.Error("the closed proxy accepted a connection")
	}
}

// TestRunAndKill: Run captures stdout and stderr apart and reports the exit
// code; Kill ends a started process with SIGKILL and reports the signal.
func TestRunAndKill(t *testing.T) {
	res, err := Run(exec.Command("/bin/sh", "-c", "echo out; echo err >&2; exit 3"))
	if err != nil || res.Stdout != "out\n" || res.Stderr != "err\n" || res.Code != 3 || res.Signal != 0 {
		t.Fatalf("Run = %+v, %v; want out, err, exit 3", res, err)
	}
	if _, err := Run(exec.Command(filepath.Join(t.TempDir(), "absent"))); err == nil {
		t.Error("Run of a missing program: no error")
	}
	p := Start(t, exec.Command("/bin/sh", "-c", "echo started; exec sleep 60"))
	if res := p.Kill(t); res.Signal != syscall.SIGKILL || res.Code != -1 {
		t.Errorf("Kill = %+v, want SIGKILL", res)
	}
}
