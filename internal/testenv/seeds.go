package testenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// SeedTask returns field ("sql" or "script") of task id in the seed flow
// file name, read from the seeds folder seeds (CHANGESINK_TEST_SEEDS): tests
// use the seed's own DDL and scripts, never a copy. It fails t when the file,
// the task or the field is missing.
func SeedTask(t testing.TB, seeds, name, id, field string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(seeds, name))
	if err != nil {
		t.Fatalf("read seed flow: %v", err)
	}
	var flow struct {
		Tasks []struct {
			ID     string `yaml:"id"`
			SQL    string `yaml:"sql"`
			Script string `yaml:"script"`
		} `yaml:"tasks"`
	}
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
