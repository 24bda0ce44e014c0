package main

// Tests of the shipped Kestra flows (flows/*.yaml) against the seeds they replace
// and against this binary's own command line: every changesink command a flow runs
// exists, every env var a flow sets is one that command reads, every required one is
// set, every outputs.<task>.vars.X a flow uses is one that command emits, and no
// Python, JDBC or serdes step remains.

import (
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"
	"gopkg.in/yaml.v3"

	"github.com/changesink/changesink/internal/kestra"
	"github.com/changesink/changesink/internal/testenv"
	"github.com/changesink/changesink/tasks/cdc"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/kafkastate"
)

const (
	flowsDir = "../../flows"
	// flowImage is the image every shipped flow runs; the README, the Dockerfile's
	// usage comment and docker-compose.yml name the same tag.
	flowImage = "ghcr.io/changesink/changesink:0.1.0"
	shellType = "io.kestra.plugin.scripts.shell.Commands"
	dockerRT  = "io.kestra.plugin.scripts.runner.docker.Docker"
)

// shippedFlow describes what each shipped flow must hold beyond what it keeps
// from its seed: the visible steps in order and the changesink command each runs.
type shippedFlow struct {
	file string
	// seed is the seed flow it replaces; a flow without one (the sync flow)
	// names secretsOf, the seed whose namespace and secret names it keeps.
	seed, secretsOf string
	network         string // the Docker runner's networkMode
	steps           []step
	produces        map[string][]string // task id → outputFiles it must declare
	// notInCompose says why docker-compose.yml does not load the flow.
	notInCompose string
}

type step struct {
	task    string
	command string // "" for a non-changesink task (the summary Log)
}

// The sharded kafka-state flow: one file per Kestra major (2.0 has Loop and
// no ForEach, 1.x has ForEach and no Loop), and the tasks both have.
const (
	shardedFlow   = "kafka-compacted-postgres-state-sharded.yaml"
	shardedFlow1x = "kestra-1.x/kafka-compacted-postgres-state-sharded.yaml"
)

var shardedSteps = []step{
	{"create_state_tables", "kafka-state setup"},
	{"shards", ""}, // a Loop (2.0) or ForEach (1.x) over the shard ids ...
	{"materialize_shard", "kafka-state materialize"}, // ... running one shard each
	{"check_saved_positions", "kafka-state verify"},
	{"require_consistent_state", ""},
	{"stop_on_inconsistent_state", ""},
}

var shippedFlows = []shippedFlow{
	{
		file:    "kafka-compacted-postgres-state.yaml",
		seed:    "kafka-compacted-postgres-state.yaml",
		network: "{{ inputs.docker_network }}", // the seed's materialize_batch had it
		steps: []step{
			{"create_state_tables", "kafka-state setup"},
			{"materialize_batch", "kafka-state materialize"},
			{"check_saved_positions", "kafka-state verify"},
			{"require_consistent_state", ""},   // the seed's If ...
			{"stop_on_inconsistent_state", ""}, // ... and Fail, on verify's output valid
			{"alert_on_lag", ""},               // an If on materialize's lag_total ...
			{"lag_above_max_lag", ""},          // ... and its Fail, off unless max_lag is set
		},
		produces: map[string][]string{"materialize_batch": {"batch-report.json"}},
	},
	{
		// The same job, the topic's partitions split into shards that a
		// Loop runs in parallel (no seed: a changesink flow; Kestra 2.0).
		file:         shardedFlow,
		network:      "{{ inputs.docker_network }}",
		steps:        shardedSteps,
		produces:     map[string][]string{"materialize_shard": {"batch-report.json"}},
		notInCompose: "it needs Kestra 2.0 (its Loop); the stack's 1.3.31 loads its 1.x variant",
	},
	{
		// Its Kestra 1.x variant: a ForEach instead of the Loop
		// (TestShardedFlowVariants holds the two together).
		file:     shardedFlow1x,
		network:  "{{ inputs.docker_network }}",
		steps:    shardedSteps,
		produces: map[string][]string{"materialize_shard": {"batch-report.json"}},
	},
	{
		file:    "postgres-clickhouse-cdc.yaml",
		seed:    "postgres-clickhouse-cdc.yaml",
		network: "{{ vars.docker_network }}", // the seed ran its scripts in the worker (Process runner)
		steps: []step{
			{"create_target", "cdc setup"},
			{"apply", "cdc apply"},
			{"summary", ""},
		},
		produces: map[string][]string{"apply": {"expected.jsonl", "pending.jsonl"}},
	},
	{
		file:      "postgres-clickhouse-sync.yaml",
		secretsOf: "postgres-clickhouse-cdc.yaml",
		network:   "{{ vars.docker_network }}",
		steps: []step{
			{"setup", "cdc setup"},
			{"sync", "cdc sync"},
			{"summary", ""},
			{"health", ""},
			{"alert", ""},
		},
		notInCompose: "it writes the trigger flow's read model, which has one writer at a time",
	},
}

// seedSecretEnv is how the seeds pass each secret: env var → secret name. A
// shipped flow must use the same secret for the same variable, so a Kestra
// instance configured for the seed needs no new secret.
var seedSecretEnv = map[string]string{
	kafkastate.EnvKafkaProperties: "KAFKA_STATE_PROPERTIES",
	kafkastate.EnvPGDSN:           "KAFKA_STATE_DSN",
	kafkastate.EnvPGUser:          "KAFKA_STATE_USER",
	kafkastate.EnvPGPassword:      "KAFKA_STATE_PASSWORD",
	"CLICKHOUSE_USERNAME":         "CLICKHOUSE_USERNAME",
	"CLICKHOUSE_PASSWORD":         "CLICKHOUSE_PASSWORD",
	// The cdc seed's Debezium trigger logs in with these (username, password).
	cdc.EnvPostgresUsername: "CDC_POSTGRES_USERNAME",
	cdc.EnvPostgresPassword: "CDC_POSTGRES_PASSWORD",
}

// commandOutputs ties each command to the result type its Run reports
// (a.em.Report) and the output files it writes; the output names come from the
// task packages themselves (Result.Outputs() keys, the exported file-name
// constants), so a renamed output fails this test instead of a Kestra run.
var commandOutputs = map[string]struct {
	result kestra.Result
	files  []string
}{
	"kafka-state setup": {result: &kafkastate.SetupResult{}},
	// Every output a materialize can emit: the lag once read, the shard of a
	// shard run, rejected with ON_BAD_RECORD=reject.
	"kafka-state materialize": {result: &kafkastate.Result{Lag: kafkastate.Offsets{}, Shard: "0/1", Reject: true}, files: []string{kafkastate.ReportFile}},
	// rejected when the topic has rejected records.
	"kafka-state verify": {result: &kafkastate.VerifyResult{Rejected: 1}},
	"cdc setup":          {result: &cdc.SetupResult{}},
	"cdc apply":          {result: &cdc.Result{}, files: []string{cdc.ExpectedFile, cdc.PendingFile}},
	// BehindKnown: behind_seconds is emitted whenever the run could tell.
	"cdc sync":          {result: &cdc.SyncResult{BehindKnown: true}},
	"cdc check":         {result: &cdc.CheckResult{}},
	"kafka-state check": {result: &kafkastate.CheckResult{}},
}

// outputNames returns the outputs a command emits on success, given the env
// a task sets: cdc setup given a source (CDC_POSTGRES_DSN) reports what
// SetupSync did.
func outputNames(cmd string, env map[string]string) []string {
	if cmd == "cdc setup" && env[cdc.EnvPostgresDSN] != "" {
		return slices.Sorted(maps.Keys((&cdc.SyncSetupResult{}).Outputs()))
	}
	o, ok := commandOutputs[cmd]
	if !ok || o.result == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(o.result.Outputs()))
}

// failureOutputs are emitted by main.fail on every failed command (hint
// when the error has one).
var failureOutputs = []string{"error_class", "error", "hint"}

func readYAML(t *testing.T, path string) map[string]any {
	t.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal(testenv.ReadFile(t, path), &doc); err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	return doc
}

// tasksOf returns every task of a flow in document order, including tasks
// nested in flowable tasks (then/else/tasks/errors/finally).
func tasksOf(flow map[string]any) []map[string]any {
	var out []map[string]any
	var walk func(list any)
	walk = func(list any) {
		items, _ := list.([]any)
		for _, it := range items {
			task, ok := it.(map[string]any)
			if !ok {
				continue
			}
			out = append(out, task)
			for _, k := range []string{"then", "else", "tasks", "errors", "finally"} {
				walk(task[k])
			}
		}
	}
	for _, k := range []string{"tasks", "errors", "finally"} {
		walk(flow[k])
	}
	return out
}

func taskByID(flow map[string]any, id string) map[string]any {
	for _, task := range tasksOf(flow) {
		if task["id"] == id {
			return task
		}
	}
	return nil
}

func stringMap(t *testing.T, v any, what string) map[string]string {
	t.Helper()
	if v == nil {
		return nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%s: want a map, got %T", what, v)
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		s, ok := v.(string)
		if !ok {
			t.Fatalf("%s.%s: want a string (Kestra env values are strings), got %T %v", what, k, v, v)
		}
		out[k] = s
	}
	return out
}

// cliCommand is what the flows test needs to know about one leaf command.
type cliCommand struct {
	envs     map[string]bool // every env var the command (or a parent) reads
	required []string        // env vars of required flags without a default
}

var requiredHelp = regexp.MustCompile(`\bRequired\b`)

// cliCommands walks kong's model of the real command line: leaf command path
// ("kafka-state materialize") → the env vars it reads and the required ones.
func cliCommands(t *testing.T) map[string]cliCommand {
	t.Helper()
	parser, err := newParser(&CLI{}, io.Discard, io.Discard, func(int) {})
	if err != nil {
		t.Fatalf("newParser: %v", err)
	}
	out := map[string]cliCommand{}
	var walk func(n *kong.Node, path []string)
	walk = func(n *kong.Node, path []string) {
		if n.Type == kong.CommandNode {
			path = append(path, n.Name)
		}
		var leaf bool = true
		for _, c := range n.Children {
			if c.Type == kong.CommandNode {
				leaf = false
				walk(c, path)
			}
		}
		if !leaf || len(path) == 0 {
			return
		}
		cmd := cliCommand{envs: map[string]bool{}}
		for p := n; p != nil; p = p.Parent {
			for _, f := range p.Flags {
				for _, e := range f.Envs {
					cmd.envs[e] = true
				}
				// kong-required, or validated by the task and documented as
				// "Required" in the flag's help (kafka-state's TOPIC and PG_DSN).
				if (f.Required || requiredHelp.MatchString(f.Help)) && !f.HasDefault {
					if len(f.Envs) == 0 {
						t.Errorf("%s: required flag --%s has no env var: a Kestra flow cannot set it", strings.Join(path, " "), f.Name)
						continue
					}
					cmd.required = append(cmd.required, f.Envs[0])
				}
			}
		}
		out[strings.Join(path, " ")] = cmd
	}
	walk(parser.Model.Node, nil)
	return out
}

// changesinkCommand returns the changesink command a task's command lines run,
// e.g. "kafka-state materialize", failing on anything else in commands.
func changesinkCommand(t *testing.T, task map[string]any) string {
	t.Helper()
	lines, _ := task["commands"].([]any)
	if len(lines) != 1 {
		t.Fatalf("task %v: want exactly one command line, got %d", task["id"], len(lines))
	}
	line, _ := lines[0].(string)
	fields := strings.Fields(line)
	if len(fields) < 2 || fields[0] != "changesink" {
		t.Fatalf("task %v: command %q does not run changesink", task["id"], line)
	}
	for _, f := range fields[1:] {
		if strings.HasPrefix(f, "-") {
			t.Fatalf("task %v: command %q passes flags; flows pass settings as env vars (secrets must never be on a command line)", task["id"], line)
		}
	}
	return strings.Join(fields[1:], " ")
}

// seedDeviations are the deliberate differences from the seed flows that
// TestFlowsKeepSeed accepts, each as (flow file, input id) → the shipped
// default; the README's differences table names each one.
var seedDeviations = map[[2]string]any{
	// The shipped compose stack's network: with the seed's bridge, its
	// kafka and postgres host names do not resolve.
	{"kafka-compacted-postgres-state.yaml", "docker_network"}: "changesink",
	// Drain mode runs batch after batch: the seed's 1000 records a batch
	// would spend most of a drain on each batch's fixed costs.
	{"kafka-compacted-postgres-state.yaml", "max_records"}: 100000,
}

// seedExtensions are what a shipped flow adds to its seed, which
// TestFlowsKeepSeed accepts on top of it: inputs, flow outputs and env vars
// of a task, by flow file.
var seedExtensions = map[string]struct {
	inputs, outputs []string
	env             map[string][]string // task id → env vars
}{
	"kafka-compacted-postgres-state.yaml": {
		inputs:  []string{"drain_seconds", "max_lag", "on_bad_record"},
		outputs: []string{"lag_total", "rejected"},
		env:     map[string][]string{"materialize_batch": {"DRAIN_SECONDS", "ON_BAD_RECORD"}},
	},
}

// withoutExtensions returns the list of maps (inputs or outputs) without
// those whose id is one of ids.
func withoutExtensions(list any, ids []string) any {
	items, ok := list.([]any)
	if !ok {
		return list
	}
	var out []any
	for _, it := range items {
		if m, ok := it.(map[string]any); ok && slices.Contains(ids, fmt.Sprint(m["id"])) {
			continue
		}
		out = append(out, it)
	}
	return out
}

// withDeviations returns the seed's inputs with the deliberate default
// changes of file applied (a copy; the seed is not changed).
func withDeviations(t *testing.T, file string, inputs any) any {
	t.Helper()
	list, _ := inputs.([]any)
	out := make([]any, len(list))
	for i, in := range list {
		m, _ := in.(map[string]any)
		if d, ok := seedDeviations[[2]string{file, fmt.Sprint(m["id"])}]; ok {
			c := make(map[string]any, len(m))
			for k, v := range m {
				c[k] = v
			}
			c["defaults"] = d
			in = c
		}
		out[i] = in
	}
	return out
}

func TestFlowsKeepSeed(t *testing.T) {
	dir := testenv.Seeds(t)
	for _, sf := range shippedFlows {
		if sf.seed == "" {
			continue
		}
		t.Run(sf.file, func(t *testing.T) {
			if sf.seed == "" {
				keepsSeedNames(t, sf, dir)
				return
			}
			seed := readYAML(t, filepath.Join(dir, sf.seed))
			got := readYAML(t, filepath.Join(flowsDir, sf.file))
			seed["inputs"] = withDeviations(t, sf.file, seed["inputs"])
			ext := seedExtensions[sf.file]
			got["inputs"] = withoutExtensions(got["inputs"], ext.inputs)
			got["outputs"] = withoutExtensions(got["outputs"], ext.outputs)
			for _, key := range []string{"id", "namespace", "description", "concurrency", "inputs", "triggers", "outputs"} {
				if !reflect.DeepEqual(got[key], seed[key]) {
					t.Errorf("%s: %s differs from the seed\n got: %#v\nwant: %#v", sf.file, key, got[key], seed[key])
				}
			}
			// Every seed variable is still there (values may point at the compose stack).
			seedVars, _ := seed["variables"].(map[string]any)
			gotVars, _ := got["variables"].(map[string]any)
			for k := range seedVars {
				if _, ok := gotVars[k]; !ok {
					t.Errorf("%s: seed variable %q is missing", sf.file, k)
				}
			}
			// Every task the seed's flow outputs point at still exists.
			for _, ref := range taskRefs(got) {
				if taskByID(got, ref.task) == nil {
					t.Errorf("%s: %s refers to task %q, which does not exist", sf.file, ref.expr, ref.task)
				}
			}
			// A seed task that ran with env (the Python script) passed the same secrets
			// under the same names the shipped task uses.
			for _, st := range tasksOf(seed) {
				seedEnv := stringMap(t, st["env"], fmt.Sprintf("seed %v env", st["id"]))
				if seedEnv == nil {
					continue
				}
				nt := taskByID(got, st["id"].(string))
				if nt == nil {
					t.Errorf("%s: seed task %v (with env) has no task of the same id", sf.file, st["id"])
					continue
				}
				env := stringMap(t, nt["env"], fmt.Sprintf("%v env", st["id"]))
				for _, k := range ext.env[fmt.Sprint(st["id"])] {
					delete(env, k)
				}
				if !reflect.DeepEqual(env, seedEnv) {
					t.Errorf("%s: task %v env differs from the seed's\n got: %v\nwant: %v", sf.file, st["id"], env, seedEnv)
				}
			}
		})
	}
}

// keepsSeedNames checks a flow that replaces no seed against the seed it
// stands beside: the same namespace, and every secret it reads is one that
// seed reads, so a Kestra instance set up for the seed needs no new secret.
func keepsSeedNames(t *testing.T, sf shippedFlow, seeds string) {
	t.Helper()
	raw := testenv.ReadFile(t, filepath.Join(seeds, sf.secretsOf))
	seed := readYAML(t, filepath.Join(seeds, sf.secretsOf))
	got := readYAML(t, filepath.Join(flowsDir, sf.file))
	if got["namespace"] != seed["namespace"] {
		t.Errorf("%s: namespace %v, want the seed %s's %v", sf.file, got["namespace"], sf.secretsOf, seed["namespace"])
	}
	secretName := regexp.MustCompile(`secret\('([A-Z0-9_]+)'\)`)
	seedSecrets := map[string]bool{}
	for _, m := range secretName.FindAllStringSubmatch(string(raw), -1) {
		seedSecrets[m[1]] = true
	}
	for _, m := range secretName.FindAllStringSubmatch(string(testenv.ReadFile(t, filepath.Join(flowsDir, sf.file))), -1) {
		if !seedSecrets[m[1]] {
			t.Errorf("%s reads secret %s, which the seed %s does not (it reads %v)", sf.file, m[1], sf.secretsOf, slices.Sorted(maps.Keys(seedSecrets)))
		}
	}
}

func TestFlowsRunRealCommands(t *testing.T) {
	commands := cliCommands(t)
	for name := range commands {
		if _, ok := commandOutputs[name]; !ok && name != "version" && name != "help" {
			t.Errorf("command %q has no entry in commandOutputs; add the result type it reports", name)
		}
	}
	globals := map[string]bool{"WORKING_DIR": true, "CHANGESINK_LOG_LEVEL": true}
	for env := range globals {
		if !commands["version"].envs[env] {
			t.Errorf("global env var %s is not read by the binary any more; update this test", env)
		}
	}
	for _, sf := range shippedFlows {
		t.Run(sf.file, func(t *testing.T) {
			flow := readYAML(t, filepath.Join(flowsDir, sf.file))
			vars, _ := flow["variables"].(map[string]any)
			if vars["image"] != flowImage {
				t.Errorf("variables.image = %v, want %s", vars["image"], flowImage)
			}
			var ids []string
			for _, task := range tasksOf(flow) {
				ids = append(ids, fmt.Sprint(task["id"]))
			}
			var want []string
			for _, s := range sf.steps {
				want = append(want, s.task)
			}
			if !slices.Equal(ids, want) {
				t.Errorf("tasks = %v, want %v (setup, the work and verify stay separate steps)", ids, want)
			}
			for _, s := range sf.steps {
				task := taskByID(flow, s.task)
				if task == nil {
					continue
				}
				if s.command == "" {
					if task["type"] == shellType {
						t.Errorf("task %s: expected a non-changesink task", s.task)
					}
					continue
				}
				checkShellTask(t, task, sf.network)
				got := changesinkCommand(t, task)
				if got != s.command {
					t.Errorf("task %s runs `changesink %s`, want `changesink %s`", s.task, got, s.command)
				}
				cmd, ok := commands[got]
				if !ok {
					t.Errorf("task %s: `changesink %s` is not a command of this binary (have %v)", s.task, got, slices.Sorted(maps.Keys(commands)))
					continue
				}
				env := stringMap(t, task["env"], s.task+".env")
				for k, v := range env {
					if !cmd.envs[k] && !globals[k] {
						t.Errorf("task %s sets %s, which `changesink %s` does not read (it reads %v)", s.task, k, got, slices.Sorted(maps.Keys(cmd.envs)))
					}
					if secret, ok := seedSecretEnv[k]; ok {
						if wantV := "{{ secret('" + secret + "') }}"; v != wantV {
							t.Errorf("task %s: %s = %q, want %q (the seed's secret name)", s.task, k, v, wantV)
						}
					} else if strings.Contains(v, "secret(") {
						t.Errorf("task %s: %s reads a secret the seeds do not name: %q", s.task, k, v)
					}
				}
				for _, req := range cmd.required {
					if _, ok := env[req]; !ok {
						t.Errorf("task %s: `changesink %s` requires %s, which the task does not set", s.task, got, req)
					}
				}
				declared := map[string]bool{}
				files, _ := task["outputFiles"].([]any)
				for _, f := range files {
					declared[fmt.Sprint(f)] = true
					if !slices.Contains(commandOutputs[got].files, fmt.Sprint(f)) {
						t.Errorf("task %s declares outputFile %v, which `changesink %s` does not write", s.task, f, got)
					}
				}
				for _, f := range sf.produces[s.task] {
					if !declared[f] {
						t.Errorf("task %s must declare outputFiles %s", s.task, f)
					}
				}
			}
			// Every outputs.<task>.vars.X and outputFiles['F'] the flow uses is produced.
			for _, ref := range taskRefs(flow) {
				task := taskByID(flow, ref.task)
				if task == nil {
					t.Errorf("%s refers to a task that does not exist", ref.expr)
					continue
				}
				if task["type"] != shellType {
					continue
				}
				cmd := changesinkCommand(t, task)
				env := stringMap(t, task["env"], ref.task+".env")
				switch ref.kind {
				case "vars":
					if !slices.Contains(outputNames(cmd, env), ref.name) && !slices.Contains(failureOutputs, ref.name) {
						t.Errorf("%s: `changesink %s` emits no output %q (it emits %v)", ref.expr, cmd, ref.name, outputNames(cmd, env))
					}
				case "outputFiles":
					files, _ := task["outputFiles"].([]any)
					if !slices.Contains(files, any(ref.name)) {
						t.Errorf("%s: task %s does not declare outputFiles %q", ref.expr, ref.task, ref.name)
					}
				}
			}
		})
	}
}

// checkShellTask checks the container settings every changesink task shares.
func checkShellTask(t *testing.T, task map[string]any, network string) {
	t.Helper()
	id := task["id"]
	if task["type"] != shellType {
		t.Errorf("task %v: type %v, want %s", id, task["type"], shellType)
	}
	if task["containerImage"] != "{{ vars.image }}" {
		t.Errorf("task %v: containerImage %v, want {{ vars.image }}", id, task["containerImage"])
	}
	runner, _ := task["taskRunner"].(map[string]any)
	if runner["type"] != dockerRT {
		t.Errorf("task %v: taskRunner.type %v, want %s", id, runner["type"], dockerRT)
	}
	if runner["networkMode"] != network {
		t.Errorf("task %v: taskRunner.networkMode %v, want %s", id, runner["networkMode"], network)
	}
	if runner["user"] != "0" {
		t.Errorf(`task %v: taskRunner.user %v, want "0" (the working dir is root-owned, plugin-scripts#411)`, id, runner["user"])
	}
	for _, k := range []string{"script", "beforeCommands", "interpreter"} {
		if _, ok := task[k]; ok {
			t.Errorf("task %v: has %s; a changesink task runs one command and installs nothing", id, k)
		}
	}
}

type taskRef struct {
	expr, task, kind, name string
}

var refPattern = regexp.MustCompile(`outputs\.([A-Za-z0-9_]+)\.(vars|outputFiles)(?:\.([A-Za-z0-9_]+)|\[\s*'([^']+)'\s*\])`)

// taskRefs finds every outputs.<task>.vars.X and outputs.<task>.outputFiles['F']
// in a flow's strings (task properties and flow outputs).
func taskRefs(flow map[string]any) []taskRef {
	var out []taskRef
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			for _, m := range refPattern.FindAllStringSubmatch(v, -1) {
				name := m[3]
				if name == "" {
					name = m[4]
				}
				out = append(out, taskRef{expr: m[0], task: m[1], kind: m[2], name: name})
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		case map[string]any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(flow)
	return out
}

func TestFlowsHaveNoPython(t *testing.T) {
	for _, sf := range shippedFlows {
		t.Run(sf.file, func(t *testing.T) {
			raw := testenv.ReadFile(t, filepath.Join(flowsDir, sf.file))
			lower := strings.ToLower(string(raw))
			for _, banned := range []string{"python", "pip install", "script:", ".jdbc.", ".serdes.", "beforecommands"} {
				if strings.Contains(lower, banned) {
					t.Errorf("%s still contains %q", sf.file, banned)
				}
			}
			for _, task := range tasksOf(readYAML(t, filepath.Join(flowsDir, sf.file))) {
				typ := fmt.Sprint(task["type"])
				if typ != shellType && !strings.HasPrefix(typ, "io.kestra.plugin.core.") {
					t.Errorf("task %v has type %s; only shell.Commands running changesink and core tasks remain", task["id"], typ)
				}
			}
		})
	}
}

// TestFlowKafkaStateKeepsSeedFail: the kafka flow ends as the seed did, with
// its If and Fail tasks (same ids, same message) deciding on the check's
// output `valid` (the seed's row.valid); for that, verify runs with
// REPORT_ONLY=true, so that it reports a record ahead of its position instead
// of failing the task itself.
func TestFlowKafkaStateKeepsSeedFail(t *testing.T) {
	dir := testenv.Seeds(t)
	const file = "kafka-compacted-postgres-state.yaml"
	seed := readYAML(t, filepath.Join(dir, file))
	got := readYAML(t, filepath.Join(flowsDir, file))
	want := taskByID(seed, "require_consistent_state")
	if want == nil {
		t.Fatal("the seed has no require_consistent_state task")
	}
	cond, _ := want["condition"].(string)
	if !strings.Contains(cond, "outputs.check_saved_positions.row.valid") {
		t.Fatalf("the seed's condition %q does not read row.valid", cond)
	}
	want["condition"] = strings.Replace(cond, ".row.valid", ".vars.valid", 1)
	if have := taskByID(got, "require_consistent_state"); !reflect.DeepEqual(have, want) {
		t.Errorf("require_consistent_state differs from the seed's (with row.valid read as vars.valid)\n got: %#v\nwant: %#v", have, want)
	}
	check := taskByID(got, "check_saved_positions")
	if env := stringMap(t, check["env"], "check_saved_positions.env"); env["REPORT_ONLY"] != "true" {
		t.Errorf(`check_saved_positions: REPORT_ONLY = %q, want "true" (else verify fails the task and the seed's Fail is never reached)`, env["REPORT_ONLY"])
	}
	if !slices.Contains(outputNames("kafka-state verify", nil), "valid") {
		t.Errorf("kafka-state verify emits no output valid (it emits %v)", outputNames("kafka-state verify", nil))
	}
}

// TestFlowCDCFiles checks the CDC flow's input files: the batch comes from the
// replay input or the Debezium trigger, and the mapping the command reads is
// shipped inline and equals flows/orders.mapping.yaml.
func TestFlowCDCFiles(t *testing.T) {
	flow := readYAML(t, filepath.Join(flowsDir, "postgres-clickhouse-cdc.yaml"))
	vars, _ := flow["variables"].(map[string]any)
	for _, id := range []string{"create_target", "apply"} {
		task := taskByID(flow, id)
		if task == nil {
			t.Fatalf("task %s missing", id)
		}
		env := stringMap(t, task["env"], id+".env")
		files := stringMap(t, task["inputFiles"], id+".inputFiles")
		mappingFile := env["CDC_MAPPING"]
		if mappingFile == "" {
			t.Errorf("task %s: CDC_MAPPING is not set", id)
			continue
		}
		content, ok := files[mappingFile]
		if !ok {
			t.Errorf("task %s: CDC_MAPPING=%s is not among its inputFiles %v", id, mappingFile, slices.Sorted(maps.Keys(files)))
			continue
		}
		m := regexp.MustCompile(`^\{\{\s*vars\.([A-Za-z0-9_]+)\s*\}\}$`).FindStringSubmatch(content)
		if m == nil {
			t.Errorf("task %s: inputFiles[%s] = %q, want {{ vars.<name> }} (the mapping inline in the flow)", id, mappingFile, content)
			continue
		}
		text, _ := vars[m[1]].(string)
		checkInlineMapping(t, text, fmt.Sprint(vars["postgres_database"]))
		if id == "apply" {
			batch := env["CDC_BATCH_FILE"]
			if batch == "" {
				batch = "changes.ion" // the command's default
			}
			if got, want := files[batch], "{{ inputs.replay_file ?? trigger.uris['data'] }}"; got != want {
				t.Errorf("apply: inputFiles[%s] = %q, want %q", batch, got, want)
			}
		}
	}
}

// checkInlineMapping checks the mapping text a flow ships against
// flows/orders.mapping.yaml (owned by the cdc task family) and against the
// flow's source database variable.
func checkInlineMapping(t *testing.T, text, database string) {
	t.Helper()
	var inline any
	if err := yaml.Unmarshal([]byte(text), &inline); err != nil {
		t.Fatalf("inline mapping does not parse as YAML: %v", err)
	}
	path := filepath.Join(flowsDir, "orders.mapping.yaml")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("%s: %v (the cdc task family ships it)", path, err)
		return
	}
	var shipped any
	if err := yaml.Unmarshal(raw, &shipped); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if !reflect.DeepEqual(inline, shipped) {
		t.Errorf("the inline mapping differs from %s\n got: %v\nwant: %v", path, inline, shipped)
	}
	m, err := mapping.Parse("inline orders_mapping", []byte(text))
	if err != nil {
		t.Fatalf("the inline mapping is refused by changesink: %v", err)
	}
	if m.Source.Database != database {
		t.Errorf("the inline mapping's source database is %q, want variables.postgres_database %q (the seed's prepare_batch check)", m.Source.Database, database)
	}
}

// TestShardedFlowVariants holds the sharded flow's two files together: the
// 1.x variant is the 2.0 file with the Loop written as a ForEach (its
// iteration value taskrun.value instead of item.value, no outputs, which a
// ForEach does not have) and nothing else changed.
func TestShardedFlowVariants(t *testing.T) {
	v2 := readYAML(t, filepath.Join(flowsDir, shardedFlow))
	v1 := readYAML(t, filepath.Join(flowsDir, shardedFlow1x))
	l2, l1 := taskByID(v2, "shards"), taskByID(v1, "shards")
	if l2["type"] != "io.kestra.plugin.core.flow.Loop" || l1["type"] != "io.kestra.plugin.core.flow.ForEach" {
		t.Fatalf("shards: types %v and %v, want Loop (2.0) and ForEach (1.x)", l2["type"], l1["type"])
	}
	m2 := taskByID(v2, "materialize_shard")
	env2 := stringMap(t, m2["env"], "materialize_shard.env (2.0)")
	if want := "{{ item.value }}/{{ inputs.shards }}"; env2["SHARD"] != want {
		t.Errorf("2.0 SHARD = %q, want %q", env2["SHARD"], want)
	}
	if _, ok := l2["outputs"]; !ok {
		t.Error("2.0 Loop has no outputs: each iteration is an execution of its own, the shards' results are lost")
	}
	// Rewrite the 2.0 file into its 1.x form; the rest must be equal.
	env2["SHARD"] = "{{ taskrun.value }}/{{ inputs.shards }}"
	envAny := map[string]any{}
	for k, v := range env2 {
		envAny[k] = v
	}
	m2["env"] = envAny
	l2["type"] = l1["type"]
	delete(l2, "outputs")
	delete(l2, "description")
	delete(l1, "description")
	if !reflect.DeepEqual(v2, v1) {
		t.Errorf("%s and %s differ beyond the loop task:\n2.0: %#v\n1.x: %#v", shardedFlow, shardedFlow1x, v2, v1)
	}
}

// TestFlowSyncSettings checks the sync flow's settings: both tasks read the
// same source, slot, publication, mapping and target; the mapping is inline,
// a mapping set changesink accepts, whose source database is the DSN's and
// whose public.orders is the read model the trigger flow writes
// (flows/orders.mapping.yaml); the DSN holds no credentials; and the
// schedule runs every minute, one execution at a time, recovers only the
// last missed run, and is never stopped (an unread slot keeps WAL on the
// source).
func TestFlowSyncSettings(t *testing.T) {
	flow := readYAML(t, filepath.Join(flowsDir, "postgres-clickhouse-sync.yaml"))
	vars, _ := flow["variables"].(map[string]any)
	setup := stringMap(t, taskByID(flow, "setup")["env"], "setup.env")
	sync := stringMap(t, taskByID(flow, "sync")["env"], "sync.env")
	for _, k := range []string{cdc.EnvPostgresDSN, cdc.EnvPostgresUsername, cdc.EnvPostgresPassword, cdc.EnvSlot, cdc.EnvPublication,
		cdc.EnvMapping, cdc.EnvClickHouseURL, cdc.EnvClickHouseUsername, cdc.EnvClickHousePassword} {
		if setup[k] == "" || setup[k] != sync[k] {
			t.Errorf("%s: setup sets %q, sync %q; both must read the same", k, setup[k], sync[k])
		}
	}
	for _, id := range []string{"setup", "sync"} {
		files := stringMap(t, taskByID(flow, id)["inputFiles"], id+".inputFiles")
		if got := files[setup[cdc.EnvMapping]]; got != "{{ vars.sync_mapping }}" {
			t.Errorf("%s: inputFiles[%s] = %q, want {{ vars.sync_mapping }} (the mapping inline in the flow)", id, setup[cdc.EnvMapping], got)
		}
	}
	// The health task fails the execution past each threshold, on the
	// outputs sync reports.
	health := taskByID(flow, "health")
	conds := fmt.Sprint(health["conditions"])
	for out, max := range map[string]string{"behind_seconds": "max_behind_seconds", "lag_bytes": "max_lag_bytes",
		"retained_wal_bytes": "max_retained_wal_bytes"} {
		if n, ok := vars[max].(int); !ok || n <= 0 {
			t.Errorf("variable %s = %v, want a positive threshold", max, vars[max])
		}
		if !strings.Contains(conds, "outputs.sync.vars."+out+" ?? 0) <= vars."+max) {
			t.Errorf("the health task does not hold %s to %s: %s", out, max, conds)
		}
		if _, ok := (&cdc.SyncResult{BehindKnown: true}).Outputs()[out]; !ok {
			t.Errorf("sync reports no output %s", out)
		}
	}
	if health["type"] != "io.kestra.plugin.core.execution.Assert" || !strings.Contains(conds, "outputs.sync.vars.wal_status") {
		t.Errorf("health %v: want a core Assert on the slot's health, wal_status included", health)
	}
	if d, err := time.ParseDuration(fmt.Sprint(vars["max_duration"])); err != nil || d <= 0 || d >= time.Minute {
		t.Errorf("max_duration %v (%v): want a duration that leaves room in the minute", vars["max_duration"], err)
	}

	dsn, err := url.Parse(fmt.Sprint(vars["postgres_dsn"]))
	if err != nil {
		t.Fatalf("postgres_dsn: %v", err)
	}
	if dsn.User != nil {
		t.Errorf("postgres_dsn names a user or password; they come from the secrets")
	}
	set, err := mapping.ParseSet("inline sync_mapping", []byte(fmt.Sprint(vars["sync_mapping"])))
	if err != nil {
		t.Fatalf("the inline mapping is refused by changesink: %v", err)
	}
	if got := set.Tables(); !slices.Equal(got, []string{"public.orders"}) {
		t.Errorf("the mapping lists %v, want public.orders", got)
	}
	orders, err := cdc.LoadMapping(filepath.Join(flowsDir, "orders.mapping.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := set.For(strings.TrimPrefix(dsn.Path, "/"), "public", "orders", orders.Columns, orders.Key)
	if err != nil {
		t.Fatalf("the mapping of public.orders from the DSN's database: %v", err)
	}
	m.File = orders.File
	if !reflect.DeepEqual(m, orders) {
		t.Errorf("public.orders does not go to the trigger flow's read model\n got: %+v\nwant: %+v", m, orders)
	}

	triggers, _ := flow["triggers"].([]any)
	if len(triggers) != 1 {
		t.Fatalf("want one trigger, got %d", len(triggers))
	}
	trig, _ := triggers[0].(map[string]any)
	if trig["type"] != "io.kestra.plugin.core.trigger.Schedule" || trig["cron"] != "* * * * *" {
		t.Errorf("trigger %v: want a Schedule every minute", trig)
	}
	if trig["recoverMissedSchedules"] != "LAST" {
		t.Errorf("recoverMissedSchedules %v: want LAST (one run catches up; one per missed minute would queue up)", trig["recoverMissedSchedules"])
	}
	if _, ok := trig["stopAfter"]; ok {
		t.Errorf("the schedule has stopAfter: a stopped schedule leaves the slot unread, keeping WAL on the source")
	}
	if c, _ := flow["concurrency"].(map[string]any); c["limit"] != 1 || c["behavior"] != "QUEUE" {
		t.Errorf("concurrency %v: want limit 1, behavior QUEUE", c)
	}
}
