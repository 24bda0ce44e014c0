package cdc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/changesink/changesink/internal/kestra"
	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/internal/testhook"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/target"
)

// The child of TestStoppedHolderAfterLocking: it applies the batch
// envStoppedBatch to the database envStoppedDB and, once it holds the
// lock, creates the file envStoppedChild and waits for the file next to it
// named "go" before it goes on.
const (
	envStoppedChild = "CDC_TEST_CHILD_STOPPED"
	envStoppedBatch = "CDC_TEST_CHILD_STOPPED_BATCH"
	envStoppedDB    = "CDC_TEST_CHILD_STOPPED_DB"
)

// TestStoppedHolderAfterLocking is issue 28 case 4, stopped early: a run
// (A, a child process) takes the target's lock and is frozen (SIGSTOP,
// its heartbeat too) for longer than the lock's stale bound; run B breaks
// the lock, applies a newer batch of the same keys and records it; A is
// resumed. A must stop saying that its lock was broken (ErrTargetLocked,
// transient: a re-run converges), not refuse its batch as "versions went
// backwards" (whose hint is to rebuild a healthy target), and write
// nothing: the ledger holds Z's and B's rows, one per sequence number,
// and the live view B's rows. The other stop points (between the lock
// check and each write) are TestStoppedHolder's (lock_test.go).
func TestStoppedHolderAfterLocking(t *testing.T) {
	e := newEnv(t, ordersMapping)
	e.setup()
	batch := func(lsn int64, status string) []any {
		var evs []any
		for id := int64(1); id <= 3; id++ {
			evs = append(evs, orderEvent(id, id, lsn+id, status, lsn+id, false))
		}
		return evs
	}
	if _, _, err := e.apply(false, batch(100, "z")...); err != nil {
		t.Fatalf("batch Z: %v", err)
	}
	dir := t.TempDir()
	ready, goOn := filepath.Join(dir, "ready"), filepath.Join(dir, "go")
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), envStoppedChild+"="+ready, envStoppedBatch+"="+writeFile(t, "a.ion", encode(t, false, batch(200, "a")...)),
		envStoppedDB+"="+e.db)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}) // closed once the child is reaped
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the child never held the lock:\n%s", out.String())
		}
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(testLockTiming.Stale + 2*time.Second)
	if _, _, err := e.apply(false, batch(300, "b")...); err != nil {
		t.Fatalf("batch B, which breaks the frozen holder's lock: %v", err)
	}
	if err := os.WriteFile(goOn, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the resumed holder did not end:\n%s", out.String())
	}
	said := out.String()
	if code := cmd.ProcessState.ExitCode(); code != 3 || !strings.Contains(said, "lock: true") || strings.Contains(said, "backwards: true") {
		t.Errorf("the resumed holder exited %d, want 3 saying its lock was broken (ErrTargetLocked), not that versions went backwards:\n%s", code, said)
	}
	ledger := mapping.Qualified(e.db, mapping.LedgerName(e.m))
	if got := e.query("SELECT seq, count() FROM " + ledger + " GROUP BY seq HAVING count() > 1"); len(got) > 0 {
		t.Errorf("the ledger holds two rows of one sequence number: %v", got)
	}
	if got := e.query("SELECT count() FROM " + ledger + " WHERE kind = 'batch'"); got[0] != "2" {
		t.Errorf("%s batch rows in the ledger, want 2 (Z and B; the stopped holder wrote none)", got[0])
	}
	if got, want := e.query("SELECT id, status FROM "+mapping.Qualified(e.db, e.m.Target.LiveView)+" ORDER BY id"), []string{"1\tb", "2\tb", "3\tb"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("live rows %q, want B's %q", got, want)
	}
}

// stoppedChild is TestStoppedHolderAfterLocking's child: it prints how
// its apply ended and exits with the code the CLI would.
func stoppedChild() int {
	m, err := mapping.Load(ordersMapping)
	if err != nil {
		fmt.Println(err)
		return 4
	}
	m.Target.Database, m.Target.CreateDatabase = os.Getenv(envStoppedDB), false
	dir, err := os.MkdirTemp("", "cdc-stopped")
	if err != nil {
		fmt.Println(err)
		return 4
	}
	defer os.RemoveAll(dir)
	ready := os.Getenv(envStoppedChild)
	cfg := Config{Mapping: m, ClickHouse: target.ClickHouse{URL: os.Getenv("CHANGESINK_TEST_CLICKHOUSE"), Timeout: time.Minute},
		BatchFile: os.Getenv(envStoppedBatch)}
	env := Env{Dir: kestra.Dir{Path: dir}, hooks: testhook.Hooks{LockTiming: testLockTiming}}
	env.hooks.Locked = func(context.Context) error {
		if err := os.WriteFile(ready, nil, 0o644); err != nil {
			return err
		}
		for {
			if _, err := os.Stat(filepath.Join(filepath.Dir(ready), "go")); err == nil {
				return nil
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	_, err = Apply(context.Background(), cfg, env)
	fmt.Printf("lock: %v, backwards: %v, class %v: %v\n", errors.Is(err, ErrTargetLocked), errors.Is(err, ErrWentBackwards), outcome.Classify(err), err)
	switch outcome.Classify(err) {
	case outcome.OK:
		return 0
	case outcome.Refused:
		return 1
	case outcome.Config:
		return 2
	case outcome.Transient:
		return 3
	}
	return 4
}
