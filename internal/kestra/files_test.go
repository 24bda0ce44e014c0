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
	commitFile(t, d, "old.json", `{"new": 1}`)
	if b, _ := os.ReadFile(filepath.Join(d.Path, "old.json")); !strings.Contains(string(b), `"new": 1`) {
		t.Errorf("old.json = %q, want it replaced", b)
	}
	entries, _ := os.ReadDir(d.Path)
	if len(entries) != 2 {
		t.Errorf("working directory holds %d entries, want 2 (no temporary file left)", len(entries))
	}
}

// commitFile writes content to the output file name through Create and
// Commit, as the tasks write theirs.
func commitFile(t *testing.T, d Dir, name, content string) {
	t.Helper()
	f, err := d.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Abort()
	if _, err := f.WriteString(content); err != nil {
		t.Fatal(err)
	}
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
}
