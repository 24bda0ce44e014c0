package parity

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// seedFlow is the part of a seed flow file the tests read.
type seedFlow struct {
	Tasks []seedTask `yaml:"tasks"`
}

type seedTask struct {
	ID     string `yaml:"id"`
	SQL    string `yaml:"sql"`
	Script string `yaml:"script"`
}

// seedTaskField returns field ("sql" or "script") of task id in the seed
// flow file name, read from the seeds folder: the tests use the seed's own
// DDL and scripts, never a copy.
func seedTaskField(t *testing.T, seeds, name, id, field string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(seeds, name))
	if err != nil {
		t.Fatalf("read seed flow: %v", err)
	}
	var flow seedFlow
	if err := yaml.Unmarshal(raw, &flow); err != nil {
		t.Fatalf("parse seed flow %s: %v", name, err)
	}
	for _, task := range flow.Tasks {
		if task.ID != id {
			continue
		}
		v := map[string]string{"sql": task.SQL, "script": task.Script}[field]
		if strings.TrimSpace(v) == "" {
			t.Fatalf("seed flow %s: task %s has no %s", name, id, field)
		}
		return v
	}
	t.Fatalf("seed flow %s has no task %s", name, id)
	return ""
}

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
