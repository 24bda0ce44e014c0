package testenv

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// module is this repository's Go module.
const module = "github.com/changesink/changesink"

// changesinkPackage is the command the tests that run the binary build.
const changesinkPackage = module + "/cmd/changesink"

// Build builds cmd/changesink into the file bin (go build, bounded by ctx);
// an error carries the compiler's output.
func Build(ctx context.Context, bin string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, changesinkPackage)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", changesinkPackage, err, out)
	}
	return nil
}

// BuildChangesink builds cmd/changesink into a temporary directory of t
// (within 5 minutes) and returns the binary's path; it fails t when the
// build does.
func BuildChangesink(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "changesink")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := Build(ctx, bin); err != nil {
		t.Fatal(err)
	}
	return bin
}
