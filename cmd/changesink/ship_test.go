package main

// Tests of what ships around the binary, without a Docker engine: the
// Dockerfile builds this very package the way `go build ./cmd/changesink` does,
// and that build is static and stamped; docker-compose.yml loads with
// compose-go (the loader Docker Compose itself uses) and wires the stack the
// flows expect.

import (
	"bufio"
	"context"
	"debug/elf"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
)

const repoRoot = "../.."

// dockerfile is the part of the Dockerfile these tests read.
type dockerfile struct {
	args   map[string]string // ARG defaults declared before the first FROM
	stages []dockerStage
}

type dockerStage struct {
	from, name string
	lines      []string // instructions after FROM, continuation lines joined
}

func parseDockerfile(t *testing.T) dockerfile {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	df := dockerfile{args: map[string]string{}}
	var logical []string
	var cur strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if strings.HasPrefix(line, "#") { // a comment inside a continued instruction
			continue
		}
		if strings.HasSuffix(line, `\`) {
			cur.WriteString(strings.TrimSuffix(line, `\`) + " ")
			continue
		}
		cur.WriteString(line)
		logical = append(logical, cur.String())
		cur.Reset()
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for _, l := range logical {
		fields := strings.Fields(l)
		switch strings.ToUpper(fields[0]) {
		case "FROM":
			st := dockerStage{from: fields[1]}
			if len(fields) >= 4 && strings.EqualFold(fields[2], "AS") {
				st.name = fields[3]
			}
			df.stages = append(df.stages, st)
		case "ARG":
			if len(df.stages) == 0 {
				name, def, _ := strings.Cut(fields[1], "=")
				df.args[name] = def
				continue
			}
			fallthrough
		default:
			if len(df.stages) == 0 {
				t.Fatalf("Dockerfile: instruction before FROM: %s", l)
			}
			st := &df.stages[len(df.stages)-1]
			st.lines = append(st.lines, l)
		}
	}
	return df
}

// expand resolves ${NAME} against the global ARG defaults.
func (df dockerfile) expand(s string) string {
	return os.Expand(s, func(k string) string { return df.args[k] })
}

// goBuild is a parsed `RUN CGO_ENABLED=0 go build ...` line.
type goBuild struct {
	env     []string
	flags   []string // flags other than -ldflags and -o
	ldflags []string
	out     string
	pkg     string
}

// shellWords splits a shell command line, honouring double and single quotes.
func shellWords(s string) []string {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// changesinkBuild finds the RUN line that builds /out/changesink.
func changesinkBuild(t *testing.T, df dockerfile) (goBuild, dockerStage) {
	t.Helper()
	for _, st := range df.stages {
		for _, l := range st.lines {
			if !strings.HasPrefix(l, "RUN ") || !strings.Contains(l, "go build") || !strings.Contains(l, "/out/changesink ") {
				continue
			}
			words := shellWords(strings.TrimPrefix(l, "RUN "))
			var b goBuild
			i := 0
			for ; i < len(words) && strings.Contains(words[i], "="); i++ {
				b.env = append(b.env, words[i])
			}
			if i+1 >= len(words) || words[i] != "go" || words[i+1] != "build" {
				t.Fatalf("Dockerfile: want `RUN [ENV=..] go build ...`, got %s", l)
			}
			for i += 2; i < len(words); i++ {
				switch w := words[i]; {
				case w == "-ldflags" && i+1 < len(words):
					b.ldflags = strings.Fields(words[i+1])
					i++
				case w == "-o" && i+1 < len(words):
					b.out = words[i+1]
					i++
				case strings.HasPrefix(w, "-"):
					b.flags = append(b.flags, w)
				default:
					b.pkg = w
				}
			}
			return b, st
		}
	}
	t.Fatal("Dockerfile: no RUN go build ... -o /out/changesink line")
	return goBuild{}, dockerStage{}
}

func TestDockerfileBuildsTheCommand(t *testing.T) {
	df := parseDockerfile(t)
	b, buildStage := changesinkBuild(t, df)

	// The same package as `go build ./cmd/changesink`, resolved by the go tool.
	list := func(pkg string) string {
		cmd := exec.Command("go", "list", "-f", "{{.ImportPath}} {{.Name}}", pkg)
		cmd.Dir = repoRoot
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", pkg, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got, want := list(b.pkg), list("./cmd/changesink"); got != want {
		t.Errorf("Dockerfile builds %s (%s), want %s", b.pkg, got, want)
	}
	if !slices.Contains(b.env, "CGO_ENABLED=0") {
		t.Errorf("Dockerfile go build env %v lacks CGO_ENABLED=0 (a static binary for the small base image)", b.env)
	}
	if !slices.Contains(b.flags, "-trimpath") {
		t.Errorf("Dockerfile go build flags %v lack -trimpath", b.flags)
	}
	for _, want := range []string{"-s", "-w", "main.version=$VERSION", "main.commit=$COMMIT"} {
		if !slices.Contains(b.ldflags, want) {
			t.Errorf("Dockerfile -ldflags %v lack %s", b.ldflags, want)
		}
	}
	if b.out != "/out/changesink" {
		t.Errorf("Dockerfile builds into %s", b.out)
	}

	// The builder's Go is the module's Go line, pinned by an exact tag.
	builder := df.expand(buildStage.from)
	goMod, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goLine := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(goMod)
	if goLine == nil || !regexp.MustCompile(`^golang:`+regexp.QuoteMeta(string(goLine[1]))+`\.\d+`).MatchString(builder) {
		t.Errorf("builder image %s is not golang:<go.mod's %s>.<patch>", builder, goLine[1])
	}

	// The final (default) stage: a pinned small base with a shell, the binary on PATH, root.
	final := df.stages[len(df.stages)-1]
	base := df.expand(final.from)
	if !regexp.MustCompile(`^(alpine|busybox):\d+\.\d+\.\d+`).MatchString(base) {
		t.Errorf("final base image %s: want alpine or busybox pinned to an exact version (it must have /bin/sh: shell.Commands clears the entrypoint)", base)
	}
	var labels, copied, cmd, certs bool
	for _, l := range final.lines {
		switch {
		case strings.HasPrefix(l, "USER ") && !slices.Contains([]string{"USER root", "USER 0", "USER 0:0"}, l):
			t.Errorf("final stage sets %s: Kestra's working dir is root-owned (plugin-scripts#411), run as root", l)
		case strings.HasPrefix(l, "COPY ") && strings.HasSuffix(l, "/out/changesink /usr/local/bin/changesink"):
			copied = true
		case strings.HasPrefix(l, "LABEL ") && strings.Contains(l, "org.opencontainers.image.source") && strings.Contains(l, "org.opencontainers.image.version"):
			labels = true
		case strings.HasPrefix(l, "CMD "):
			cmd = true
		case strings.HasPrefix(l, "COPY ") && strings.HasSuffix(l, " /etc/ssl/certs/ca-certificates.crt"):
			certs = true
		case strings.HasPrefix(l, "ENTRYPOINT "):
			t.Errorf("final stage sets %s; shell.Commands clears it and a plain `docker run` should show the help", l)
		}
	}
	if strings.HasPrefix(base, "alpine:") {
		certs = true // Alpine's base image carries ca-certificates-bundle
	}
	if !copied || !labels || !cmd || !certs {
		t.Errorf("final stage: binary at /usr/local/bin/changesink %v, OCI labels %v, CMD %v, CA bundle %v; want all", copied, labels, cmd, certs)
	}

	ignore, err := os.ReadFile(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	ignored := strings.Fields(string(ignore))
	for _, want := range []string{".git", ".scratch"} {
		if !slices.Contains(ignored, want) {
			t.Errorf(".dockerignore does not exclude %s", want)
		}
	}
	for _, need := range []string{"go.mod", "go.sum", "cmd", "internal", "tasks"} {
		if slices.Contains(ignored, need) {
			t.Errorf(".dockerignore excludes %s, which the build needs", need)
		}
	}
}

// TestDockerStaticBuild runs the Dockerfile's build command on this machine and
// checks the result is statically linked, small and stamped.
func TestDockerStaticBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIPPED LOUDLY: -short; the static build of the Dockerfile's command did NOT run")
	}
	df := parseDockerfile(t)
	b, _ := changesinkBuild(t, df)
	const version, commit = "0.1.0-shiptest", "abc1234"
	out := filepath.Join(t.TempDir(), "changesink")
	args := append([]string{"build"}, b.flags...)
	ld := strings.NewReplacer("$VERSION", version, "$COMMIT", commit).Replace(strings.Join(b.ldflags, " "))
	args = append(args, "-ldflags", ld, "-o", out, b.pkg)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), b.env...)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, msg)
	}

	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("binary has a PT_INTERP program header: not statically linked")
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("binary needs shared libraries %v (err %v): not statically linked", libs, err)
	}
	st, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("static binary: %d bytes (%.1f MiB)", st.Size(), float64(st.Size())/(1<<20))
	// The image target is under 30 MB: the binary, the CA bundle (~0.2 MB) and the base.
	base := df.expand(df.stages[len(df.stages)-1].from)
	baseSize := map[string]int64{"busybox": 2 << 20, "alpine": 9 << 20}[strings.Split(base, ":")[0]]
	if image := st.Size() + baseSize + 256<<10; baseSize == 0 || image > 30_000_000 {
		t.Errorf("static binary %d bytes + base %s (~%d bytes) + CA bundle = ~%d bytes: over the 30 MB image target", st.Size(), base, baseSize, image)
	} else {
		t.Logf("estimated image size: ~%.1f MB on %s", float64(image)/1e6, base)
	}

	got, err := exec.CommandContext(ctx, out, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("changesink version: %v\n%s", err, got)
	}
	if want := "changesink " + version + " (commit " + commit + ")"; !strings.Contains(string(got), want) {
		t.Errorf("changesink version printed %q, want %q", got, want)
	}
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
	df := parseDockerfile(t)
	for _, target := range []string{cs.Build.Target, demo.Build.Target} {
		if !slices.ContainsFunc(df.stages, func(s dockerStage) bool { return s.name == target }) {
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

	// Kestra: standalone, the two flows from ./flows, a secret for every secret() the flows use.
	k := service("kestra")
	command := strings.Join(k.Command, " ")
	if !strings.Contains(command, "server standalone") || !strings.Contains(command, "--flow-path") {
		t.Errorf("kestra command %q: want server standalone --flow-path", command)
	}
	flowPath := k.Command[slices.Index(k.Command, "--flow-path")+1]
	mounted := map[string]bool{}
	for _, v := range k.Volumes {
		if strings.HasPrefix(v.Target, flowPath+"/") {
			mounted[filepath.Base(v.Target)] = true
			if filepath.Dir(v.Source) != filepath.Join(root, "flows") {
				t.Errorf("kestra mounts flow %s from %s, want ./flows", v.Target, v.Source)
			}
		}
	}
	secretName := regexp.MustCompile(`secret\('([A-Z0-9_]+)'\)`)
	for _, sf := range shippedFlows {
		if !mounted[sf.file] {
			t.Errorf("kestra does not load flows/%s into %s", sf.file, flowPath)
		}
		raw, err := os.ReadFile(filepath.Join(flowsDir, sf.file))
		if err != nil {
			t.Fatal(err)
		}
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

// TestShipREADME checks the README gives a new user the commands that matter.
func TestShipREADME(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	for _, want := range []string{".ci/run", ".ci/demo", "docker compose up", flowImage, "SECRET_", "## Runbook", "## Benchmarks"} {
		if !strings.Contains(readme, want) {
			t.Errorf("README.md does not mention %q", want)
		}
	}
	for _, script := range []string{".ci/demo"} {
		st, err := os.Stat(filepath.Join(repoRoot, script))
		if err != nil || st.Mode()&0o111 == 0 {
			t.Errorf("%s is missing or not executable (%v)", script, err)
		}
	}
}
