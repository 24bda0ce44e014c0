package parity

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/changesink/changesink/internal/testenv"
)

// binPath is the changesink binary built once by TestMain; buildErr is why
// it could not be built (tests that need it fail with that message).
var (
	binPath  string
	buildErr error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "changesink-parity-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "parity: temp dir:", err)
		os.Exit(2)
	}
	binPath = filepath.Join(dir, "changesink")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	buildErr = testenv.Build(ctx, binPath)
	cancel()
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// changesinkBinary returns the path of the built binary or fails the test.
func changesinkBinary(t *testing.T) string {
	t.Helper()
	if buildErr != nil {
		t.Fatalf("changesink binary unavailable: %v", buildErr)
	}
	return binPath
}

// procResult is how one process run ended, as Kestra would see it.
type procResult struct {
	testenv.Result
	Outputs map[string]any // the merged ::{"outputs":...}:: lines, numbers as json.Number
	Elapsed time.Duration
}

func (r procResult) String() string {
	return fmt.Sprintf("exit %d after %s\n--- stdout ---\n%s--- stderr ---\n%s", r.Code, r.Elapsed.Round(time.Millisecond), r.Stdout, r.Stderr)
}

// baseEnv is the environment every process starts from: enough to find
// programs and nothing from the test's own environment (so no
// CHANGESINK_TEST_* leaks into what is compared).
func baseEnv(extra map[string]string) []string {
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "LANG=C.UTF-8", "TMPDIR=" + os.TempDir()}
	for k, v := range extra {
		env = append(env, k+"="+v)
	}
	return env
}

// runProc runs name args in dir with exactly env, stdin from stdin (may be
// nil), and parses the Kestra outputs lines it prints. A process that cannot
// be started, or that outlives timeout, fails the test.
func runProc(t *testing.T, timeout time.Duration, dir string, env []string, stdin []byte, name string, args ...string) procResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = env
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	start := time.Now()
	run, err := testenv.Run(cmd)
	res := procResult{Result: run, Elapsed: time.Since(start)}
	switch {
	case ctx.Err() != nil && (err != nil || res.Code != 0):
		t.Fatalf("%s %s: still running after %s\n%s", name, strings.Join(args, " "), timeout, res)
	case err != nil:
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	outputs, perr := parseOutputs(res.Stdout)
	if perr != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), perr, res)
	}
	res.Outputs = outputs
	return res
}

// parseOutputs merges every `::{"outputs":{...}}::` line of stdout, as
// Kestra does. Numbers stay json.Number so big integers compare exactly.
func parseOutputs(stdout string) (map[string]any, error) {
	out := map[string]any{}
	sc := bufio.NewScanner(strings.NewReader(stdout))
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "::{") || !strings.HasSuffix(line, "}::") {
			continue
		}
		var msg struct {
			Outputs map[string]any `json:"outputs"`
		}
		dec := json.NewDecoder(strings.NewReader(line[2 : len(line)-2]))
		dec.UseNumber()
		if err := dec.Decode(&msg); err != nil {
			return nil, fmt.Errorf("protocol line %q is not JSON: %w", line, err)
		}
		for k, v := range msg.Outputs {
			out[k] = v
		}
	}
	return out, sc.Err()
}

// canonical renders v as canonical JSON (sorted keys, json.Number kept),
// for comparing decoded values across implementations.
func canonical(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("<unencodable %T: %v>", v, err)
	}
	return string(b)
}

// decodeJSON decodes b keeping numbers exact.
func decodeJSON(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// subset reports the keys of want whose values differ from got's, as
// "key: got X, want Y" lines.
func subset(got map[string]any, want map[string]any) []string {
	var diffs []string
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			diffs = append(diffs, fmt.Sprintf("%s: missing, want %s", k, canonical(w)))
			continue
		}
		if !jsonEqual(g, w) {
			diffs = append(diffs, fmt.Sprintf("%s: got %s, want %s", k, canonical(g), canonical(w)))
		}
	}
	return diffs
}

// jsonEqual compares two decoded JSON-ish values by their canonical
// encoding, with numbers compared by their decimal text (so 2 from YAML and
// json.Number("2") from a protocol line are equal).
func jsonEqual(a, b any) bool {
	na, errA := decodeJSON([]byte(canonical(a)))
	nb, errB := decodeJSON([]byte(canonical(b)))
	if errA != nil || errB != nil {
		return false
	}
	return canonical(na) == canonical(nb)
}
