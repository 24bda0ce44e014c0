package testenv

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// seedsVar names the seeds folder when set; .ci/env sets it to the
// repository's copy, parity/seeds, which is used when it is unset.
const seedsVar = "CHANGESINK_TEST_SEEDS"

// SeedFiles returns the seed flows and their extracted Python, as the seeds
// folder holds them (paths relative to it).
func SeedFiles() []string {
	return []string{"kafka-compacted-postgres-state.yaml", "postgres-clickhouse-cdc.yaml",
		"reference/kafka_state_materialize.py", "reference/cdc_prepare_batch.py", "reference/cdc_select_changes.py",
		"reference/cdc_verify_batch.py"}
}

// Seeds returns the folder of the original seed flows and their Python:
// seedsVar when set, else parity/seeds of this repository. The seeds are
// part of the repository, so there is nothing to skip: it fails t when a
// seed file is missing from the folder.
func Seeds(t testing.TB) string {
	t.Helper()
	dir := os.Getenv(seedsVar)
	if dir == "" {
		dir = filepath.Join(root(t), "parity", "seeds")
	}
	for _, f := range SeedFiles() {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatalf("the seeds folder %s (%s, else parity/seeds) lacks %s: %v", dir, seedsVar, f, err)
		}
	}
	return dir
}

// root returns the repository's root: the nearest folder above the test's
// working directory whose go.mod is this module's. It fails t when there is
// none.
func root(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(mod, []byte("module "+module+"\n")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("no go.mod of %s above the test's working directory", module)
		}
		dir = parent
	}
}

// SeedTask returns field ("sql" or "script") of task id in the seed flow
// file name, read from the seeds folder seeds (Seeds): tests use the seed's
// own DDL and scripts, never one written out again in a test. It fails t
// when the file, the task or the field is missing.
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
