package kestra

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/changesink/changesink/internal/testenv"
)

// TestCreateRefusesADirectoryName: Create fails at once when the output
// file's name is a directory (Commit's rename would fail after the task
// had done its work); an existing file of that name is replaced.
func TestCreateRefusesADirectoryName(t *testing.T) {
	d := Dir{Path: t.TempDir()}
	if err := os.Mkdir(filepath.Join(d.Path, "taken.json"), 0o755); err != nil {
		t.Fatal(err)
	}
	if f, err := d.Create("taken.json"); err == nil || !strings.Contains(err.Error(), "is a directory") {
		if f != nil {
			f.Abort()
		}
		t.Fatalf("Create over a directory: err = %v, want 'is a directory'", err)
	}
	testenv.WriteFile(t, filepath.Join(d.Path, "old.json"), []byte("old"), 0o644)
	if err := d.WriteJSON("old.json", map[string]int{"new": 1}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(d.Path, "old.json")); !strings.Contains(string(b), `"new": 1`) {
		t.Errorf("old.json = %q, want it replaced", b)
	}
	entries, _ := os.ReadDir(d.Path)
	if len(entries) != 2 {
		t.Errorf("working directory holds %d entries, want 2 (no temporary file left)", len(entries))
	}
}
