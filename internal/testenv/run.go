package testenv

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"sync"
)

// Result is how a process ended: what it printed on stdout and on stderr
// (captured apart), its exit code (-1 when a signal ended it) and the signal
// that ended it (0 when it exited).
type Result struct {
	Stdout, Stderr string
	Code           int
	Signal         syscall.Signal
}

// Output is what the process printed, stdout then stderr, for a failure
// message.
func (r Result) Output() string { return r.Stdout + r.Stderr }

// Run runs cmd (built by the caller: its args, Dir, Env, Stdin) to its end,
// capturing stdout and stderr apart, and returns how it ended. A non-zero
// exit or a signal is no error, it is in the Result; the error says the
// process could not be started or waited for (for an exec.CommandContext
// command, also one that exited 0 after its context ended).
func Run(cmd *exec.Cmd) (Result, error) {
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return ended(err, &stdout, &stderr)
}

// Process is a child process started by Start, its output captured.
type Process struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
	waited         bool
}

// Start starts cmd with stdout and stderr captured apart, failing t when it
// cannot; the process is killed when the test ends if it still runs then.
func Start(t testing.TB, cmd *exec.Cmd) *Process {
	t.Helper()
	p := &Process{cmd: cmd}
	cmd.Stdout, cmd.Stderr = &p.stdout, &p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	t.Cleanup(func() {
		if !p.waited {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return p
}

// Kill sends the process SIGKILL, waits for it and returns how it ended
// (a process that had ended already is reaped as it ended).
func (p *Process) Kill(t testing.TB) Result {
	t.Helper()
	return p.Stop(t, syscall.SIGKILL)
}

// Stop sends the process sig, waits for it and returns how it ended (a
// process that had ended already is reaped as it ended).
func (p *Process) Stop(t testing.TB, sig syscall.Signal) Result {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("send signal %d (%v) to %s: %v", int(sig), sig, p.cmd.Path, err)
	}
	p.waited = true
	res, err := ended(p.cmd.Wait(), &p.stdout, &p.stderr)
	if err != nil {
		t.Fatalf("wait for %s: %v", p.cmd.Path, err)
	}
	return res
}

// ended turns the error of a Run or Wait into a Result.
func ended(err error, stdout, stderr *bytes.Buffer) (Result, error) {
	res := Result{Stdout: stdout.String(), Stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		res.Code = exit.ExitCode()
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.Signal = ws.Signal()
		}
	default:
		return res, err
	}
	return res, nil
}

// LockedBuffer is a bytes buffer safe for concurrent writers: a process's
// two pipes, or a logger's handler and the test that reads it.
type LockedBuffer struct {
	mu sync.Mutex
	b  []byte
}

// Write appends p.
func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, p...)
	return len(p), nil
}

// String is what was written so far.
func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}
