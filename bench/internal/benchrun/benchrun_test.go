package benchrun

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestLoadAvgGivesThreeLoads(t *testing.T) {
	got := LoadAvg()
	f := strings.Fields(got)
	if len(f) != 3 {
		t.Fatalf("LoadAvg() = %q, want three load averages", got)
	}
	for _, x := range f {
		if _, err := strconv.ParseFloat(x, 64); err != nil {
			t.Errorf("LoadAvg() = %q: %q is not a number", got, x)
		}
	}
}

// TestRunMeasuresTheChildNotThisProcess: a small child's peak RSS is its
// own, even when this process holds much more memory (the rusage of a
// direct child would report this process's).
func TestRunMeasuresTheChildNotThisProcess(t *testing.T) {
	if _, err := os.Stat("/usr/bin/time"); err != nil {
		t.Skip("SKIPPED: no GNU time (/usr/bin/time); the benchmark programs need it")
	}
	ballast := make([]byte, 300<<20)
	for i := range ballast {
		ballast[i] = byte(i)
	}
	p, err := Run(context.Background(), t.TempDir(), os.Environ(), "/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	if p.MaxRSSKiB <= 0 || p.MaxRSSKiB > 100<<10 {
		t.Errorf("peak RSS of /bin/true is %d KiB with %d MiB held here, want its own few MiB", p.MaxRSSKiB, len(ballast)>>20)
	}
	if _, err := Run(context.Background(), t.TempDir(), os.Environ(), "/bin/false"); err == nil {
		t.Error("Run of /bin/false gave no error")
	}
	_ = ballast[len(ballast)-1]
}

// TestRunStopsTheMeasuredProcess: when ctx ends, the measured process is
// killed with GNU time, not left running after Run returns.
func TestRunStopsTheMeasuredProcess(t *testing.T) {
	if _, err := os.Stat("/usr/bin/time"); err != nil {
		t.Skip("SKIPPED: no GNU time (/usr/bin/time); the benchmark programs need it")
	}
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, err := Run(ctx, dir, os.Environ(), "/bin/sh", "-c", "echo $$ > "+pidFile+"; exec sleep 600"); err == nil {
		t.Fatal("Run of sleep 600 under a 500 ms deadline gave no error")
	}
	raw, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("the measured process did not start: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	// Gone, or a zombie waiting for init to reap it (killed; its parent,
	// GNU time, died with it). The SIGKILL was sent before Run returned,
	// but a process that was running on the other CPU (state R) dies
	// once it is next scheduled: wait for that, not for sleep 600.
	state := func() string {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return "gone"
		}
		if f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:])); len(f) > 0 {
			return f[0]
		}
		return "?"
	}
	s := state()
	for end := time.Now().Add(10 * time.Second); s != "gone" && s != "Z" && time.Now().Before(end); s = state() {
		time.Sleep(20 * time.Millisecond)
	}
	if s != "gone" && s != "Z" {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Errorf("the measured process %d still runs (state %s) 10 s after Run returned", pid, s)
	}
}

// TestRunMasksPasswordsInItsError: a failed command's error quotes its
// arguments and output without the passwords of a DSN among them or of
// the environment's PGPASSWORD.
func TestRunMasksPasswordsInItsError(t *testing.T) {
	if _, err := os.Stat("/usr/bin/time"); err != nil {
		t.Skip("SKIPPED: no GNU time (/usr/bin/time); the benchmark programs need it")
	}
	env := append(os.Environ(), "PGPASSWORD=env-secret-pw")
	_, err := Run(context.Background(), t.TempDir(), env, "/bin/sh", "-c", `echo "$0 $PGPASSWORD"; exit 3`,
		"postgres://u:dsn-secret-pw@127.0.0.1:5432/db")
	if err == nil {
		t.Fatal("the failing command succeeded")
	}
	for _, secret := range []string{"dsn-secret-pw", "env-secret-pw"} {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("the error shows %s: %v", secret, err)
		}
	}
	if !strings.Contains(err.Error(), "127.0.0.1:5432") {
		t.Errorf("the error lost the command's arguments: %v", err)
	}
}
