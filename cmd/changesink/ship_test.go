package main

// Tests of what ships around the binary that need no Docker engine: the
// Dockerfile's defaults for a build with a registry, and docker-compose.yml,
// loaded with compose-go (the loader Docker Compose itself uses), wiring the
// stack the flows expect. The image is built and run by image_test.go.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/changesink/changesink/internal/testenv"
)

const repoRoot = "../.."

// TestDockerfileDefaults checks what CI's build cannot: CI builds the
// Dockerfile with base images made on the machine (.ci/docker passes
// GO_IMAGE and BASE_IMAGE), so the defaults a user with a registry builds
// from are checked here: the builder is golang at go.mod's Go version, the
// base a BusyBox pinned to a release, and no `# syntax=` line (it makes
// BuildKit pull a frontend image). The image itself is tested by building
// and running it (image_test.go). The build context leaves out local state.
func TestDockerfileDefaults(t *testing.T) {
	raw := testenv.ReadFile(t, filepath.Join(repoRoot, "Dockerfile"))
	dockerfile := string(raw)
	goMod := testenv.ReadFile(t, filepath.Join(repoRoot, "go.mod"))
	goLine := regexp.MustCompile(`(?m)^go (\d+\.\d+(\.\d+)?)$`).FindSubmatch(goMod)
	if goLine == nil {
		t.Fatal("go.mod has no go line")
	}
	goVersion := string(goLine[1])
	if strings.Count(goVersion, ".") == 1 {
		goVersion += `.\d+`
	} else {
		goVersion = regexp.QuoteMeta(goVersion)
	}
	for _, want := range []string{`(?m)^ARG GO_IMAGE=golang:` + goVersion + `$`, `(?m)^ARG BASE_IMAGE=busybox:\d+\.\d+\.\d+(-\w+)?$`} {
		if !regexp.MustCompile(want).MatchString(dockerfile) {
			t.Errorf("Dockerfile has no line matching %s (go.mod: go %s)", want, goLine[1])
		}
	}
	if regexp.MustCompile(`(?mi)^#\s*syntax\s*=`).MatchString(dockerfile) {
		t.Errorf("Dockerfile has a # syntax= line: BuildKit would pull its frontend image")
	}

	ignore := testenv.ReadFile(t, filepath.Join(repoRoot, ".dockerignore"))
	ignored := strings.Fields(string(ignore))
	for _, want := range []string{".git", ".scratch"} {
		if !slices.Contains(ignored, want) {
			t.Errorf(".dockerignore does not exclude %s", want)
		}
	}
}

// dockerfileStages returns the names of the Dockerfile's stages (FROM ... AS name).
func dockerfileStages(t *testing.T) []string {
	t.Helper()
	raw := testenv.ReadFile(t, filepath.Join(repoRoot, "Dockerfile"))
	var names []string
	for _, m := range regexp.MustCompile(`(?mi)^FROM\s+\S+\s+AS\s+(\S+)\s*$`).FindAllStringSubmatch(string(raw), -1) {
		names = append(names, m[1])
	}
	return names
}

func loadCompose(t *testing.T) *types.Project {
	t.Helper()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	opts, err := cli.NewProjectOptions([]string{filepath.Join(root, "docker-compose.yml")},
		cli.WithWorkingDirectory(root), cli.WithName("changesink"), cli.WithResolvedPaths(true))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := cli.ProjectFromOptions(ctx, opts)
	if err != nil {
		t.Fatalf("compose-go cannot load docker-compose.yml: %v", err)
	}
	if p, err = p.WithServicesEnvironmentResolved(false); err != nil {
		t.Fatalf("resolve env_file: %v", err)
	}
	return p
}

func TestComposeStack(t *testing.T) {
	p := loadCompose(t)
	root, _ := filepath.Abs(repoRoot)
	service := func(name string) types.ServiceConfig {
		s, err := p.GetService(name)
		if err != nil {
			t.Fatalf("service %s: %v", name, err)
		}
		return s
	}

	// Every service a depends_on names exists, with a condition that waits for it.
	for name, s := range p.Services {
		for dep, cond := range s.DependsOn {
			if _, ok := p.Services[dep]; !ok {
				t.Errorf("service %s depends on %s, which does not exist", name, dep)
			}
			if cond.Condition != types.ServiceConditionHealthy && cond.Condition != types.ServiceConditionCompletedSuccessfully {
				t.Errorf("service %s: depends_on %s has condition %q; want service_healthy or service_completed_successfully", name, dep, cond.Condition)
			}
			if cond.Condition == types.ServiceConditionHealthy && p.Services[dep].HealthCheck == nil {
				t.Errorf("service %s waits for %s to be healthy, but %s has no healthcheck", name, dep, dep)
			}
		}
	}
	for _, name := range []string{"kafka", "postgres", "clickhouse", "kestra"} {
		if hc := service(name).HealthCheck; hc == nil || len(hc.Test) == 0 {
			t.Errorf("service %s has no healthcheck", name)
		}
	}
	for name, s := range p.Services {
		if s.Build == nil && !regexp.MustCompile(`:[0-9v][^:]*$`).MatchString(s.Image) {
			t.Errorf("service %s: image %q is not pinned to a version tag", name, s.Image)
		}
	}

	// The changesink image is built from this repository's Dockerfile and tagged as the flows expect.
	cs := service("changesink")
	if cs.Build == nil || filepath.Clean(cs.Build.Context) != root {
		t.Errorf("changesink build context %v, want the repository root %s", cs.Build, root)
	} else if cs.Build.Dockerfile != "Dockerfile" {
		t.Errorf("changesink builds %s, want Dockerfile", cs.Build.Dockerfile)
	}
	if cs.Image != flowImage {
		t.Errorf("changesink image %s, want %s (the flows' vars.image)", cs.Image, flowImage)
	}
	demo := service("demo")
	if demo.Build == nil || filepath.Clean(demo.Build.Context) != root || demo.Build.Target != "demo" {
		t.Errorf("demo build %+v: want context %s, target demo", demo.Build, root)
	}
	stages := dockerfileStages(t)
	for _, target := range []string{cs.Build.Target, demo.Build.Target} {
		if !slices.Contains(stages, target) {
			t.Errorf("compose builds target %q, which the Dockerfile does not define", target)
		}
	}

	// PostgreSQL: logical decoding for the Debezium trigger, database shop with public.orders.
	pg := service("postgres")
	if !strings.Contains(strings.Join(pg.Command, " "), "wal_level=logical") {
		t.Errorf("postgres command %v does not set wal_level=logical", pg.Command)
	}
	if db := pg.Environment["POSTGRES_DB"]; db == nil || *db != "shop" {
		t.Errorf("postgres POSTGRES_DB = %v, want shop", db)
	}
	var initSQL string
	for _, v := range pg.Volumes {
		if strings.HasPrefix(v.Target, "/docker-entrypoint-initdb.d/") {
			raw, err := os.ReadFile(v.Source)
			if err != nil {
				t.Errorf("postgres init file: %v", err)
			}
			initSQL += string(raw)
		}
	}
	for _, want := range []string{"CREATE TABLE IF NOT EXISTS public.orders", "CREATE PUBLICATION kestra_clickhouse_orders", "REPLICATION"} {
		if !strings.Contains(initSQL, want) {
			t.Errorf("postgres init SQL lacks %q", want)
		}
	}

	// Kestra: standalone, the flows from ./flows it runs, a secret for every secret() the flows use.
	k := service("kestra")
	command := strings.Join(k.Command, " ")
	if !strings.Contains(command, "server standalone") || !strings.Contains(command, "--flow-path") {
		t.Errorf("kestra command %q: want server standalone --flow-path", command)
	}
	flowPath := k.Command[slices.Index(k.Command, "--flow-path")+1]
	// The stack's Kestra is 1.x: it loads the sharded flow's 1.x variant
	// (flows/kestra-1.x) in place of the 2.0 file, under the 2.0 file's name.
	mounted := map[string]bool{} // by path under ./flows
	for _, v := range k.Volumes {
		if strings.HasPrefix(v.Target, flowPath+"/") {
			rel, err := filepath.Rel(filepath.Join(root, "flows"), v.Source)
			if err != nil || strings.HasPrefix(rel, "..") {
				t.Errorf("kestra mounts flow %s from %s, want ./flows", v.Target, v.Source)
				continue
			}
			mounted[rel] = true
			if filepath.Base(rel) != filepath.Base(v.Target) {
				t.Errorf("kestra mounts flows/%s as %s: the names differ", rel, v.Target)
			}
		}
	}
	secretName := regexp.MustCompile(`secret\('([A-Z0-9_]+)'\)`)
	for _, sf := range shippedFlows {
		switch {
		case sf.notInCompose != "" && mounted[sf.file]:
			t.Errorf("kestra loads flows/%s, which the stack must not load: %s", sf.file, sf.notInCompose)
		case sf.notInCompose == "" && !mounted[sf.file]:
			t.Errorf("kestra does not load flows/%s into %s", sf.file, flowPath)
		}
		raw := testenv.ReadFile(t, filepath.Join(flowsDir, sf.file))
		for _, m := range secretName.FindAllStringSubmatch(string(raw), -1) {
			v := k.Environment["SECRET_"+m[1]]
			if v == nil {
				t.Errorf("flow %s uses secret('%s'), but kestra has no SECRET_%s", sf.file, m[1], m[1])
				continue
			}
			if _, err := base64.StdEncoding.DecodeString(*v); err != nil {
				t.Errorf("SECRET_%s is not base64 (Kestra OSS decodes it): %v", m[1], err)
			}
		}
	}
	if v := k.Environment["SECRET_KAFKA_STATE_PROPERTIES"]; v != nil {
		raw, _ := base64.StdEncoding.DecodeString(*v)
		var props map[string]string
		if err := json.Unmarshal(raw, &props); err != nil {
			t.Errorf("KAFKA_STATE_PROPERTIES is not a JSON object: %v", err)
		} else if host, _, _ := strings.Cut(props["bootstrap.servers"], ":"); p.Services[host].Name == "" {
			t.Errorf("KAFKA_STATE_PROPERTIES bootstrap.servers %q is not a compose service", props["bootstrap.servers"])
		}
	}

	// The CDC flow's containers join the compose network by name, and its hosts are services.
	cdc := readYAML(t, filepath.Join(flowsDir, "postgres-clickhouse-cdc.yaml"))
	vars, _ := cdc["variables"].(map[string]any)
	if net, ok := p.Networks["default"]; !ok || net.Name != vars["docker_network"] {
		t.Errorf("compose default network name %q, want the cdc flow's docker_network %v", net.Name, vars["docker_network"])
	}
	for _, host := range []string{vars["postgres_host"].(string), regexp.MustCompile(`//([^:/]+)`).FindStringSubmatch(vars["clickhouse_url"].(string))[1]} {
		if _, ok := p.Services[host]; !ok {
			t.Errorf("cdc flow host %q is not a compose service", host)
		}
	}
}
