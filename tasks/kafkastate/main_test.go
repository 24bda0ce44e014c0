package kafkastate

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"testing"

	"github.com/changesink/changesink/internal/kestra"
	"github.com/changesink/changesink/internal/outcome"
)

// childEnv carries, as JSON (a childRun), the batch a fault test has the
// test binary run as a process of its own (materializer): one that is
// killed, or that runs while another holds the topic's lock.
const childEnv = "KAFKASTATE_TEST_CHILD"

// childRun is the batch a child process runs: Config into the working
// directory Dir.
type childRun struct {
	Config Config
	Dir    string
}

// TestMain runs the test binary as a materializer when a fault test starts
// it as one (materializer).
func TestMain(m *testing.M) {
	if run := os.Getenv(childEnv); run != "" {
		os.Exit(materializeChild(run))
	}
	os.Exit(m.Run())
}

// materializer is the command that runs one batch of cfg in a process of
// its own: the test binary again (TestMain), killed if ctx ends first.
func materializer(ctx context.Context, t testing.TB, cfg Config) *exec.Cmd {
	t.Helper()
	run, err := json.Marshal(childRun{Config: cfg, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, os.Args[0])
	cmd.Env = append(os.Environ(), childEnv+"="+string(run))
	return cmd
}

// materializeChild runs the batch of run (a childRun) and reports it as
// changesink does: Kestra's lines on stdout (the outputs; or an ERROR line
// and the outputs error_class and error) and the class's exit code.
func materializeChild(run string) int {
	em := kestra.NewEmitter(os.Stdout, nil)
	var r childRun
	err := json.Unmarshal([]byte(run), &r)
	if err == nil {
		var res *Result
		log := slog.New(kestra.NewLogHandler(em, slog.LevelInfo))
		res, err = Materialize(context.Background(), r.Config, Env{Dir: kestra.Dir{Path: r.Dir}, Log: log})
		if err == nil {
			log.Info(res.Summary())
			err = em.Report(res)
		}
	}
	if err != nil {
		kind := outcome.Classify(err)
		_ = em.Fail(kind.String(), err.Error(), Hint(err))
		return kind.ExitCode()
	}
	return 0
}
