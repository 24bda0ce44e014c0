package parity

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// seedScript returns a reference script with the flow's Pebble expression
// for the source database rendered as the seed flow's variables render it.
func seedScript(t *testing.T, seeds, file string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(seeds, "reference", file))
	if err != nil {
		t.Fatalf("read seed script: %v", err)
	}
	s := strings.ReplaceAll(string(raw), "{{ vars.postgres_database }}", cdcSourceDB)
	if strings.Contains(s, "{{") {
		t.Fatalf("seed script %s has an expression this harness does not render: %s", file, s[strings.Index(s, "{{"):])
	}
	return s
}

// writeFile writes data to dir/name or fails the test.
func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatalf("write %s: %v", p, err)
	}
	return p
}

// readFileOr returns the contents of path, or a marker when it is absent.
func readFileOr(path string) (string, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("<%v>", err), false
	}
	return string(b), true
}
