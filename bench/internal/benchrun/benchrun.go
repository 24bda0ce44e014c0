// Package benchrun holds what the benchmark programs under bench/ share:
// the machine's load average, printed beside their timings (on a machine
// shared with other work it says how far to trust them), and the run of one
// changesink process with its wall time and peak RSS.
package benchrun

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/changesink/changesink/internal/redact"
)

// LoadAvg returns the first three fields of /proc/loadavg ("1.20 0.90
// 0.70"), or "unknown" when it cannot be read.
func LoadAvg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// Process is one finished run.
type Process struct {
	// Output is its stdout and stderr, interleaved.
	Output []byte
	// Elapsed is its wall time, start to exit.
	Elapsed time.Duration
	// MaxRSSKiB is its peak resident set in KiB, 0 when unknown.
	MaxRSSKiB int64
	// State is its exit state (CPU times).
	State *os.ProcessState
}

// Run runs name with args in dir with env and measures it. The peak RSS
// comes from GNU time (/usr/bin/time -f %M): the rusage of a child this
// process starts directly would include this process's own high-water mark,
// because Go starts children with clone(CLONE_VM) and Linux folds the
// shared memory's peak into the child's at exec. An exit other than 0 is an
// error holding the output.
func Run(ctx context.Context, dir string, env []string, name string, args ...string) (Process, error) {
	f, err := os.CreateTemp("", "benchrun-maxrss-*")
	if err != nil {
		return Process{}, err
	}
	rssFile := f.Name()
	f.Close()
	defer os.Remove(rssFile)
	cmd := exec.CommandContext(ctx, "/usr/bin/time", append([]string{"-f", "%M", "-o", rssFile, name}, args...)...)
	cmd.Dir, cmd.Env = dir, env
	// GNU time and the process it measures get a process group of their
	// own, killed whole when ctx ends: killing time alone would leave the
	// measured process running (and writing) after the benchmark gave up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	out, err := cmd.CombinedOutput()
	p := Process{Output: out, Elapsed: time.Since(start), State: cmd.ProcessState}
	if err != nil {
		// The arguments, environment and output may hold a password (a
		// DSN on the command line, PGPASSWORD): masked, as changesink masks
		// what it prints.
		var m redact.Masker
		for _, a := range args {
			m.AddDSN(a)
		}
		for _, kv := range env {
			if k, v, ok := strings.Cut(kv, "="); ok && strings.Contains(strings.ToUpper(k), "PASSWORD") {
				m.Add(v)
			} else if ok {
				m.AddDSN(v)
			}
		}
		return p, fmt.Errorf("%s %s: %v\n%s", filepath.Base(name), m.Mask(strings.Join(args, " ")), err, m.Mask(string(out)))
	}
	if b, err := os.ReadFile(rssFile); err == nil {
		p.MaxRSSKiB, _ = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	}
	return p, nil
}
