package parity

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/changesink/changesink/internal/testenv"
)

// seedScript returns a reference script with the flow's Pebble expression
// for the source database rendered as the seed flow's variables render it.
func seedScript(t *testing.T, seeds, file string) string {
	t.Helper()
	s := strings.ReplaceAll(string(testenv.ReadFile(t, filepath.Join(seeds, "reference", file))), "{{ vars.postgres_database }}", cdcSourceDB)
	if strings.Contains(s, "{{") {
		t.Fatalf("seed script %s has an expression this harness does not render: %s", file, s[strings.Index(s, "{{"):])
	}
	return s
}

// writeFile writes data to dir/name or fails the test.
func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	return testenv.WriteFile(t, filepath.Join(dir, name), data, 0o644)
}

// readFileOr returns the contents of path, or a marker when it is absent.
func readFileOr(path string) (string, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("<%v>", err), false
	}
	return string(b), true
}
