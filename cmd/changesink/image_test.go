package main

// Tests of the changesink image .ci/docker builds from the Dockerfile
// (CHANGESINK_TEST_IMAGE), run the way Kestra's Docker task runner runs a
// shell.Commands task: both jobs end to end inside the container against the
// local services, a failing run, the image's size, configuration and the
// stamped version.

import (
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/changesink/changesink/internal/testenv"
	"github.com/changesink/changesink/tasks/kafkastate"
)

// dockerSocket is the daemon Kestra's Docker runner talks to (it ignores
// DOCKER_HOST); the tests use the same one.
const dockerSocket = "unix:///var/run/docker.sock"

// testImage returns the image under test, or skips loudly (fails under
// CHANGESINK_REQUIRE_SERVICES=1) when there is none.
func testImage(t *testing.T) string {
	t.Helper()
	image := testenv.Lookup(t, "CHANGESINK_TEST_IMAGE")["CHANGESINK_TEST_IMAGE"] // .ci/docker builds it; .ci/env names it
	if _, err := exec.LookPath("docker"); err != nil {
		testenv.Missing(t, "the docker command", ".ci/docker installs Docker and builds the image")
	}
	return image
}

// docker runs the docker command against dockerSocket and returns its stdout.
func docker(ctx context.Context, t *testing.T, args ...string) []byte {
	t.Helper()
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Env = append(os.Environ(), "DOCKER_HOST="+dockerSocket)
	r, err := testenv.Run(cmd)
	if err != nil || r.Code != 0 {
		t.Fatalf("docker %s: exit %d, %v\n%s", strings.Join(args, " "), r.Code, err, r.Stderr)
	}
	return []byte(r.Stdout)
}

// taskRun is what Kestra reads back from one task's container.
type taskRun struct {
	testenv.Result
	outputs map[string]any // the ::{"outputs":...}:: lines, merged (a later key wins, as in Kestra)
}

// outputsJSON renders the outputs with sorted keys, for comparing whole sets.
func (r taskRun) outputsJSON(t *testing.T) string {
	t.Helper()
	raw, err := json.Marshal(r.outputs)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// kestraLine is the pattern of Kestra's TaskLogLineMatcher: a whole line,
// a trailing \r allowed.
var kestraLine = regexp.MustCompile(`^::(\{.*})::$`)

// runLikeKestra runs commands in image as Kestra's Docker task runner runs a
// shell.Commands task: the image's entrypoint cleared, `/bin/sh -c` with
// "set -e" and the commands joined by newlines (ScriptService.scriptCommands),
// user 0 (the shipped flows' `user: "0"`), the working directory (work, here
// mounted at /wd) as the container's working directory and WORKING_DIR, env
// as the task's env (passed by name, so no value shows on a command line),
// and the host network, where the local services listen on 127.0.0.1.
func runLikeKestra(ctx context.Context, t *testing.T, image, work string, env map[string]string, commands ...string) taskRun {
	t.Helper()
	args := []string{"run", "--rm", "--entrypoint", "", "-u", "0", "--network", "host",
		"-v", work + ":/wd", "-w", "/wd", "-e", "WORKING_DIR=/wd"}
	cmdEnv := append(os.Environ(), "DOCKER_HOST="+dockerSocket)
	for _, k := range slices.Sorted(maps.Keys(env)) {
		args = append(args, "-e", k)
		cmdEnv = append(cmdEnv, k+"="+env[k])
	}
	args = append(args, image, "/bin/sh", "-c", "set -e\n"+strings.Join(commands, "\n"))
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Env = cmdEnv
	res, err := testenv.Run(cmd)
	if err != nil {
		t.Fatalf("docker run %s: %v", strings.Join(commands, "; "), err)
	}
	r := taskRun{Result: res, outputs: map[string]any{}}
	if r.Code >= 125 { // docker run's own failures (125 daemon, 126 not executable, 127 not found)
		t.Fatalf("docker run %s: exit %d (the container did not run)\n%s%s", strings.Join(commands, "; "), r.Code, r.Stdout, r.Stderr)
	}
	for _, line := range strings.Split(r.Stdout, "\n") {
		m := kestraLine.FindStringSubmatch(strings.TrimSuffix(line, "\r"))
		if m == nil {
			continue
		}
		var v struct {
			Outputs map[string]any `json:"outputs"`
		}
		if err := json.Unmarshal([]byte(m[1]), &v); err != nil {
			t.Errorf("a Kestra line that does not parse (Kestra drops it): %s: %v", line, err)
		}
		for k, val := range v.Outputs {
			r.outputs[k] = val
		}
	}
	return r
}

// expect checks a run's exit code and that its stdout holds every want;
// changesink writes nothing to stderr (Kestra would log it as errors).
func (r taskRun) expect(t *testing.T, step string, code int, wants ...string) {
	t.Helper()
	ok := r.Code == code && r.Stderr == ""
	for _, w := range wants {
		if !strings.Contains(r.Stdout, w) {
			t.Errorf("%s: stdout lacks %q", step, w)
			ok = false
		}
	}
	if !ok {
		t.Fatalf("%s: exit %d (want %d); stdout:\n%s\nstderr:\n%s", step, r.Code, code, r.Stdout, r.Stderr)
	}
}

// TestImageContents: the image is under 30 MB, runs as root with no
// entrypoint and the help as its command, carries a static binary on PATH
// and the CA bundle, and is stamped with the flows' version and the commit
// it was built from (this checkout's, or .ci/docker has not run since).
func TestImageContents(t *testing.T) {
	image := testImage(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	raw := docker(ctx, t, "image", "inspect", "--format", "{{json .}}", image)
	var info struct {
		Size   int64
		Config struct {
			User       string
			Entrypoint []string
			Cmd        []string
			Labels     map[string]string
		}
	}
	if err := json.Unmarshal(raw, &info); err != nil {
		t.Fatalf("docker image inspect %s: %v", image, err)
	}
	if info.Size >= 30_000_000 {
		t.Errorf("image %s is %d bytes, want under 30 MB", image, info.Size)
	}
	t.Logf("%s: %.1f MB", image, float64(info.Size)/1e6)
	if u := info.Config.User; u != "" && u != "0" && u != "root" && u != "0:0" {
		t.Errorf("image user %q: Kestra's working directory is root-owned (plugin-scripts#411), run as root", u)
	}
	if len(info.Config.Entrypoint) > 0 {
		t.Errorf("image entrypoint %q; shell.Commands clears it and a plain `docker run` should show the help", info.Config.Entrypoint)
	}
	if want := []string{"changesink", "--help"}; !slices.Equal(info.Config.Cmd, want) {
		t.Errorf("image command %q, want %q", info.Config.Cmd, want)
	}
	version := strings.TrimPrefix(flowImage, "ghcr.io/changesink/changesink:")
	labels := info.Config.Labels
	if labels["org.opencontainers.image.version"] != version || labels["org.opencontainers.image.source"] == "" {
		t.Errorf("image labels %v: want org.opencontainers.image.version %s and a source", labels, version)
	}
	commit := labels["org.opencontainers.image.revision"]
	if head, err := exec.CommandContext(ctx, "git", "-C", repoRoot, "rev-parse", "--short=12", "HEAD").Output(); err == nil {
		if h := strings.TrimSpace(string(head)); commit != h {
			t.Fatalf("image %s was built from commit %q, this checkout is at %s: run .ci/docker", image, commit, h)
		}
	}

	work := t.TempDir()
	r := runLikeKestra(ctx, t, image, work, nil, "changesink version")
	r.expect(t, "changesink version", 0)
	if got, want := strings.TrimSpace(r.Stdout), "changesink "+version+" (commit "+commit+")"; got != want {
		t.Errorf("changesink version printed %q, want %q", got, want)
	}
	r = runLikeKestra(ctx, t, image, work, nil, "command -v changesink", "test -s /etc/ssl/certs/ca-certificates.crt")
	r.expect(t, "binary on PATH, CA bundle", 0)
	if got := strings.TrimSpace(r.Stdout); got != "/usr/local/bin/changesink" {
		t.Errorf("changesink is at %q, want /usr/local/bin/changesink", got)
	}
	// A plain `docker run IMAGE` (its own command) prints the help.
	if out := string(docker(ctx, t, "run", "--rm", "--network", "none", image)); !strings.Contains(out, "Usage: changesink <command>") {
		t.Errorf("docker run %s printed:\n%s\nwant the help", image, out)
	}

	// The binary is statically linked: no program interpreter, no shared libraries.
	r = runLikeKestra(ctx, t, image, work, nil, "cat /usr/local/bin/changesink")
	if r.Code != 0 {
		t.Fatalf("cat the binary: exit %d: %s", r.Code, r.Stderr)
	}
	f, err := elf.NewFile(strings.NewReader(r.Stdout))
	if err != nil {
		t.Fatalf("/usr/local/bin/changesink is not an ELF file: %v", err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("/usr/local/bin/changesink has a PT_INTERP program header: not statically linked")
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("/usr/local/bin/changesink needs shared libraries %v (err %v): not statically linked", libs, err)
	}
}

// TestImageKafkaState runs the kafka-state flow's three tasks, each in its
// own container as Kestra does, on a topic and a database of their own: setup,
// materialize (outputs, batch-report.json in the working directory, the
// rows), materialize again (nothing new), verify; then a run with a setting
// out of range fails with exit 2 and error_class config.
func TestImageKafkaState(t *testing.T) {
	image := testImage(t)
	vars := testenv.Lookup(t, "CHANGESINK_TEST_PG", "CHANGESINK_TEST_KAFKA")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	kcl, topic := kafkaTopic(t, vars["CHANGESINK_TEST_KAFKA"], "img_ks_", 2)
	rec := func(p int32, key, value string) *kgo.Record {
		r := &kgo.Record{Topic: topic, Partition: p, Key: []byte(key)}
		if value != "" {
			r.Value = []byte(value)
		}
		return r
	}
	if err := kcl.ProduceSync(ctx,
		rec(0, "a", `{"v":1}`), rec(0, "b", `{"v":2}`), rec(0, "a", `{"v":3}`),
		rec(1, "c", `{"c":"✓"}`), rec(1, "d", `{"d":1}`), rec(1, "d", ""), // the last one a tombstone
	).FirstErr(); err != nil {
		t.Fatal(err)
	}
	db, conn := pgDatabase(ctx, t, vars["CHANGESINK_TEST_PG"], "img_ks_")

	// The flow's env: PG_DSN without credentials, PGUSER and PGPASSWORD beside it.
	u, err := url.Parse(vars["CHANGESINK_TEST_PG"])
	if err != nil {
		t.Fatal(err)
	}
	user := u.User.Username()
	password, _ := u.User.Password()
	u.User, u.Path = nil, "/"+db
	env := map[string]string{
		kafkastate.EnvPGDSN: u.String(), kafkastate.EnvPGUser: user, kafkastate.EnvPGPassword: password, kafkastate.EnvTopic: topic,
		kafkastate.EnvKafkaProperties: `{"bootstrap.servers":"` + vars["CHANGESINK_TEST_KAFKA"] + `"}`,
	}
	work := t.TempDir()
	var all strings.Builder
	step := func(name string, code int, env map[string]string, command string, wants ...string) taskRun {
		t.Helper()
		r := runLikeKestra(ctx, t, image, work, env, command)
		all.WriteString(r.Stdout)
		r.expect(t, name, code, wants...)
		return r
	}

	if got := step("setup", 0, env, "changesink kafka-state setup").outputsJSON(t); got != `{"schema":"kafka_state"}` {
		t.Errorf("setup outputs %s", got)
	}
	r := step("materialize", 0, env, "changesink kafka-state materialize", `{"name":"records","type":"counter","value":6`)
	// The outputs: the seed's keys (also the report's), the batches and the lag left.
	want := `{"consumed":6,"live_keys":3,"next_offsets":{"0":3,"1":3},"tombstones":1,"topic":"` + topic + `"}`
	wantOut := `{"batches":1,"consumed":6,"lag":{"0":0,"1":0},"lag_total":0,"live_keys":3,"next_offsets":{"0":3,"1":3},"tombstones":1,"topic":"` + topic + `"}`
	if got := r.outputsJSON(t); got != wantOut {
		t.Errorf("materialize outputs %s, want %s", got, wantOut)
	}
	report, err := os.ReadFile(filepath.Join(work, "batch-report.json"))
	if err != nil {
		t.Fatalf("batch-report.json in the working directory: %v", err)
	}
	var fromFile map[string]any
	if err := json.Unmarshal(report, &fromFile); err != nil {
		t.Fatalf("batch-report.json: %v\n%s", err, report)
	}
	if got, _ := json.Marshal(fromFile); string(got) != want {
		t.Errorf("batch-report.json %s, want %s", got, want)
	}
	rows, err := conn.Query(ctx, `SELECT record_key, coalesce(payload::text, 'null'), deleted, kafka_partition, kafka_offset
		FROM kafka_state.records WHERE topic = $1 ORDER BY record_key`, topic)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var key, payload string
		var deleted bool
		var partition int32
		var offset int64
		if err := rows.Scan(&key, &payload, &deleted, &partition, &offset); err != nil {
			t.Fatal(err)
		}
		state := "live"
		if deleted {
			state = "deleted"
		}
		got = append(got, fmt.Sprintf("%s %s %s %d %d", key, payload, state, partition, offset))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	wantRows := []string{`a {"v": 3} live 0 2`, `b {"v": 2} live 0 1`, `c {"c": "✓"} live 1 0`, `d null deleted 1 2`}
	if !slices.Equal(got, wantRows) {
		t.Errorf("kafka_state.records:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantRows, "\n"))
	}

	again := `{"batches":1,"consumed":0,"lag":{"0":0,"1":0},"lag_total":0,"live_keys":3,"next_offsets":{"0":3,"1":3},"tombstones":0,"topic":"` + topic + `"}`
	if got := step("materialize again", 0, env, "changesink kafka-state materialize").outputsJSON(t); got != again {
		t.Errorf("second materialize outputs %s, want %s", got, again)
	}
	if got := step("verify", 0, env, "changesink kafka-state verify").outputsJSON(t); got != `{"topic":"`+topic+`","valid":true}` {
		t.Errorf("verify outputs %s", got)
	}

	r = step("materialize with MAX_RECORDS=0", 2, withEnv(env, kafkastate.EnvMaxRecords, "0"), "changesink kafka-state materialize", "MAX_RECORDS must be 1..100000")
	if r.outputs["error_class"] != "config" || r.outputs["consumed"] != nil {
		t.Errorf("failing run outputs %s, want error_class config and no batch outputs", r.outputsJSON(t))
	}
	if strings.Contains(all.String(), password) {
		t.Errorf("the PostgreSQL password appears in the output:\n%s", all.String())
	}
}

// TestImageCDC runs the cdc flow's two tasks in containers on a ClickHouse
// database of their own: setup, apply of the committed orders batch
// (tasks/cdc/testdata) with the outputs and expected.jsonl/pending.jsonl in
// the working directory, the same batch in binary form again (a replay:
// every key skipped, no delete applied, still verified), then a refused batch: exit 1,
// error_class refused, no output files.
func TestImageCDC(t *testing.T) {
	image := testImage(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	chURL, admin, db, work := cdcWorkspace(t, "img_cdc_")
	for src, dst := range map[string]string{"orders.text.ion": "changes.ion", "orders.binary.ion": "binary.ion"} {
		raw := testenv.ReadFile(t, filepath.Join("../../tasks/cdc/testdata", src))
		testenv.WriteFile(t, filepath.Join(work, dst), raw, 0o644)
	}
	cdcBatch(t, filepath.Join(work, "bad.ion"), false, strings.Repeat("x", 33))
	wantExpected := testenv.ReadFile(t, "../../tasks/cdc/testdata/orders.expected.jsonl")
	env := map[string]string{"CDC_MAPPING": "orders.mapping.yaml", "CLICKHOUSE_URL": chURL}
	file := func(name string) string {
		t.Helper()
		raw, err := os.ReadFile(filepath.Join(work, name))
		if err != nil {
			t.Fatalf("%s in the working directory: %v", name, err)
		}
		return string(raw)
	}

	r := runLikeKestra(ctx, t, image, work, env, "changesink cdc setup")
	r.expect(t, "setup", 0, `"table":"`+db+`.orders_cdc"`, `"view":"`+db+`.orders_live"`, `"server_version":`)

	r = runLikeKestra(ctx, t, image, work, env, "changesink cdc apply")
	r.expect(t, "apply", 0, "10 captured events, 4 newer keys applied (2 deletes)")
	if got, want := r.outputsJSON(t), `{"deletes":2,"events":10,"keys":4,"pending":4,"recreated":0,"skipped":0,"snapshot_deleted":0,"verified":4}`; got != want {
		t.Errorf("apply outputs %s, want %s", got, want)
	}
	if got := file("expected.jsonl"); got != string(wantExpected) {
		t.Errorf("expected.jsonl:\n%s\nwant (tasks/cdc/testdata/orders.expected.jsonl)\n%s", got, wantExpected)
	}
	if got := file("pending.jsonl"); got != string(wantExpected) {
		t.Errorf("pending.jsonl (every key is new):\n%s\nwant\n%s", got, wantExpected)
	}
	var live []int64
	rows, err := admin.Query(ctx, "SELECT id FROM "+db+".orders_live ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		live = append(live, id)
	}
	rows.Close()
	if !slices.Equal(live, []int64{1, 4}) {
		t.Errorf("%s.orders_live ids %v, want [1 4] (2 and 3 deleted)", db, live)
	}

	r = runLikeKestra(ctx, t, image, work, withEnv(env, "CDC_BATCH_FILE", "binary.ion"), "changesink cdc apply")
	r.expect(t, "apply the binary batch again", 0)
	if got, want := r.outputsJSON(t), `{"deletes":0,"events":10,"keys":4,"pending":0,"recreated":0,"skipped":4,"snapshot_deleted":0,"verified":4}`; got != want {
		t.Errorf("replay outputs %s, want %s", got, want)
	}
	if got := file("pending.jsonl"); got != "" {
		t.Errorf("replay pending.jsonl %q, want empty", got)
	}
	if got := file("expected.jsonl"); got != string(wantExpected) {
		t.Errorf("replay expected.jsonl:\n%s\nwant\n%s", got, wantExpected)
	}

	for _, f := range []string{"expected.jsonl", "pending.jsonl"} {
		if err := os.Remove(filepath.Join(work, f)); err != nil {
			t.Fatal(err)
		}
	}
	r = runLikeKestra(ctx, t, image, work, withEnv(env, "CDC_BATCH_FILE", "bad.ion"), "changesink cdc apply")
	r.expect(t, "a refused batch", 1, "value does not fit its column: 33 characters exceed max_length 32")
	if r.outputs["error_class"] != "refused" || r.outputs["events"] != nil {
		t.Errorf("refused run outputs %s, want error_class refused and no apply outputs", r.outputsJSON(t))
	}
	for _, f := range []string{"expected.jsonl", "pending.jsonl"} {
		if _, err := os.Stat(filepath.Join(work, f)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a refused run left %s (%v)", f, err)
		}
	}
}
