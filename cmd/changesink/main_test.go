package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/alecthomas/kong"

	"github.com/changesink/changesink/internal/kestra"
	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/redact"
	"github.com/changesink/changesink/internal/testenv"
)

// run is main for tests: Kestra's view (stdout a pipe, no env lookup for
// the output mode beyond the arguments).
func run(ctx context.Context, args []string, stdout io.Writer) int {
	return runIO(ctx, args, stdio{out: stdout, err: stdout})
}

type panicCLI struct {
	Boom panicCmd `cmd:""`
}

type panicCmd struct{}

func (panicCmd) Run(*app) error { panic("boom") }

// A bug that panics must still exit 4 (internal) with error outputs, not
// Go's exit code 2, which reads as a configuration error.
func TestPanicIsAnInternalError(t *testing.T) {
	var cli panicCLI
	parser, err := kong.New(&cli, kong.Exit(func(int) {}))
	if err != nil {
		t.Fatal(err)
	}
	kctx, err := parser.Parse([]string{"boom"})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	a := &app{ctx: context.Background(), em: kestra.NewEmitter(&out, nil), mask: &redact.Masker{}}
	err = runCommand(kctx, a)
	testenv.WantError(t, err, outcome.Internal, nil, "panic: boom")
	if code := fail(a.em, outcome.Classify(err), err); code != 4 {
		t.Fatalf("exit code = %d, want 4", code)
	}
	if !strings.Contains(out.String(), `"error_class":"internal"`) {
		t.Fatalf("no internal error_class output in %q", out.String())
	}
	var marked *outcome.Error
	if errors.As(err, &marked) {
		t.Fatalf("a panic must not carry a kind mark: %v", marked.Kind)
	}
}

// Flows set env vars, not flags: a missing required setting is named by its
// env var and its flag in the hint, whether it is unset (kong's own message)
// or empty (changesink's), and every required setting shows in its
// command's usage line.
func TestMissingRequiredSettings(t *testing.T) {
	required := map[string][]string{ // command → its required env vars
		"cdc setup":               {"CLICKHOUSE_URL"},
		"cdc sync":                {"CLICKHOUSE_URL"},
		"cdc apply":               {"CDC_MAPPING", "CLICKHOUSE_URL"},
		"kafka-state setup":       {"PG_DSN"},
		"kafka-state materialize": {"TOPIC", "KAFKA_PROPERTIES", "PG_DSN"},
		"kafka-state verify":      {"TOPIC", "PG_DSN"},
	}
	envs := flagEnvs(mustParser(t))
	for cmd, vars := range required {
		for _, how := range []string{"unset", "empty"} {
			t.Run(cmd+"/"+how, func(t *testing.T) {
				for _, name := range vars {
					t.Setenv(name, "")
					if how == "unset" {
						os.Unsetenv(name)
					}
				}
				var out bytes.Buffer
				code := run(context.Background(), strings.Fields(cmd), &out)
				if code != 2 || !strings.Contains(out.String(), `"error_class":"config"`) {
					t.Fatalf("exit code = %d, want 2 and error_class config; output:\n%s", code, out.String())
				}
				for flag, env := range envs {
					if slices.Contains(vars, env) && !strings.Contains(out.String(), env+" (flag --"+flag+")") {
						t.Errorf("output lacks %q:\n%s", env+" (flag --"+flag+")", out.String())
					}
				}
				// Unset: kong's own message; empty (which kong takes as
				// given): changesink's. Either way the hint names each
				// setting by its env var (above).
				want := map[string]string{"unset": "missing flags: --", "empty": "missing required settings: "}[how]
				if !strings.Contains(out.String(), want) || !strings.Contains(out.String(), `"hint":"Set `) {
					t.Errorf("output lacks %q and the hint:\n%s", want, out.String())
				}
			})
		}
		t.Run(cmd+"/usage", func(t *testing.T) {
			var out bytes.Buffer
			if code := run(context.Background(), append(strings.Fields(cmd), "--help"), &out); code != 0 {
				t.Fatalf("--help exit %d", code)
			}
			usage, _, _ := strings.Cut(out.String(), "\n")
			for flag, env := range envs {
				if slices.Contains(vars, env) && !strings.Contains(usage, "--"+flag+"=") {
					t.Errorf("usage line %q lacks required --%s", usage, flag)
				}
			}
		})
	}
}

// TestUnexpectedArgumentNotShown: a secret with a space passed as an
// unquoted flag ("--pg-password hunter2 pw") left its second word as an
// argument that kong's message printed ("unexpected argument pw"), past
// every mask: the message no longer shows it. It names the command it
// follows, and that command's subcommands, so a misspelt one is found.
func TestUnexpectedArgumentNotShown(t *testing.T) {
	for _, tc := range []struct {
		args, hidden, says string
	}{
		{"kafka-state setup --pg-password hunter2 pwsecondword --pg-dsn host=127.0.0.1", "pwsecondword",
			"unexpected argument (not shown: it may be part of a secret) after `changesink kafka-state setup`, which takes no arguments\"," +
				"\"error_class\":\"config\",\"hint\":\"Check the command's spelling; quote a flag value that holds spaces, or pass secrets as env vars"},
		{"kafka-state materialise", "materialise",
			"unexpected argument (not shown: it may be part of a secret) after `changesink kafka-state`, whose commands are setup, materialize, verify, check\""},
		{"cdcc apply", "cdcc", "after `changesink`, whose commands are kafka-state, cdc, version, help\""},
	} {
		t.Run(tc.args, func(t *testing.T) {
			var out bytes.Buffer
			code := run(context.Background(), strings.Fields(tc.args), &out)
			if code != 2 || !strings.Contains(out.String(), `"error_class":"config"`) {
				t.Fatalf("exit code = %d, want 2 and error_class config; output:\n%s", code, out.String())
			}
			if strings.Contains(out.String(), tc.hidden) {
				t.Errorf("the output shows the argument:\n%s", out.String())
			}
			if !strings.Contains(out.String(), tc.says) {
				t.Errorf("the output does not say %q:\n%s", tc.says, out.String())
			}
		})
	}
}

func mustParser(t *testing.T) *kong.Kong {
	t.Helper()
	p, err := newParser(&CLI{}, io.Discard, io.Discard, func(int) {})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTextOutput: for a person (a terminal, or --output/CHANGESINK_OUTPUT
// text) messages are plain and errors go to stderr; for Kestra (a pipe, or
// kestra) every failure is a protocol line on stdout.
func TestTextOutput(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		env      string
		terminal bool
		text     bool
	}{
		{"pipe", nil, "", false, false},
		{"terminal", nil, "", true, true},
		{"terminal, env kestra", nil, "kestra", true, false},
		{"pipe, env text", nil, "text", false, true},
		{"pipe, flag text", []string{"--output=text"}, "", false, true},
		{"terminal, flag kestra", []string{"--output", "kestra"}, "text", true, false},
		{"flag after --", []string{"--", "--output=text"}, "", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := stdio{terminal: tt.terminal, getenv: func(k string) string {
				if k == "CHANGESINK_OUTPUT" {
					return tt.env
				}
				return ""
			}}
			if got := textOutput(tt.args, s); got != tt.text {
				t.Errorf("textOutput = %v, want %v", got, tt.text)
			}
		})
	}
	t.Run("failure as text", func(t *testing.T) {
		t.Setenv("CDC_MAPPING", "")
		os.Unsetenv("CDC_MAPPING")
		var out, errw bytes.Buffer
		code := runIO(context.Background(), []string{"--output=text", "cdc", "apply", "--clickhouse-url", "clickhouse://127.0.0.1:1/x"}, stdio{out: &out, err: &errw})
		if code != 2 || out.Len() != 0 || !strings.HasPrefix(errw.String(), "changesink: config: missing flags: --mapping=STRING\nhint: Set CDC_MAPPING (flag --mapping)") {
			t.Fatalf("exit %d, stdout %q, stderr %q; want exit 2, nothing on stdout, the error on stderr", code, out.String(), errw.String())
		}
	})
	// A setting kong refuses by name is the one the hint names, not the
	// required ones kong had not read yet.
	t.Run("a refused setting", func(t *testing.T) {
		t.Setenv("WORKING_DIR", filepath.Join(t.TempDir(), "missing"))
		t.Setenv("CDC_MAPPING", "m.yaml")
		var out, errw bytes.Buffer
		code := runIO(context.Background(), []string{"--output=text", "cdc", "apply", "--clickhouse-url", "clickhouse://127.0.0.1:1/x"}, stdio{out: &out, err: &errw})
		if code != 2 || !strings.Contains(errw.String(), "\nhint: Fix WORKING_DIR (flag --work-dir)") || strings.Contains(errw.String(), "Set CDC_MAPPING") {
			t.Fatalf("exit %d, stderr %q; want exit 2 and a hint naming WORKING_DIR only", code, errw.String())
		}
	})
}

// TestHelpForEveryCommand: `changesink help <command>` shows each command's
// usage (every command of the tree, from kong's model), and help for a
// command that does not exist is a usage error (exit 2) naming the command it
// follows: it printed nothing and exited 0, so a typo looked like a command
// without help.
func TestHelpForEveryCommand(t *testing.T) {
	var cli CLI
	parser, err := newParser(&cli, io.Discard, io.Discard, func(int) {})
	if err != nil {
		t.Fatal(err)
	}
	var paths [][]string
	var walk func(n *kong.Node, path []string)
	walk = func(n *kong.Node, path []string) {
		for _, c := range n.Children {
			p := append(slices.Clone(path), c.Name)
			paths = append(paths, p)
			walk(c, p)
		}
	}
	walk(parser.Model.Node, nil)
	if len(paths) < 8 {
		t.Fatalf("found %d commands in the model: %v", len(paths), paths)
	}
	for _, p := range paths {
		var out bytes.Buffer
		code := run(context.Background(), append([]string{"help"}, p...), &out)
		if code != 0 || !strings.Contains(out.String(), "Usage: changesink "+strings.Join(p, " ")) {
			t.Errorf("help %s: exit %d, output:\n%s", strings.Join(p, " "), code, out.String())
		}
	}
	// The word kong stopped at is not shown, as for any other command (it
	// may be part of a secret: "help kafka-state pw=two words"); the
	// message names the command it follows instead.
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"help", "nonexistent"}, "after `changesink`, whose commands are kafka-state, cdc, version, help"},
		{[]string{"help", "kafka-state", "bogus"}, "after `changesink kafka-state`, whose commands are setup, materialize, verify"},
		{[]string{"help", "cdc", "apply", "extra"}, "after `changesink cdc apply`, which takes no arguments"},
		{[]string{"help", "kafka-state", "pw=hunter2 two"}, "after `changesink kafka-state`, whose commands are"},
	} {
		for _, text := range []bool{false, true} {
			var out, errOut bytes.Buffer
			code := runIO(context.Background(), tc.args, stdio{out: &out, err: &errOut, terminal: text})
			all := out.String() + errOut.String()
			word := tc.args[len(tc.args)-1]
			if code != 2 || strings.Contains(all, word) || !strings.Contains(all, "help: unexpected argument (not shown") ||
				!strings.Contains(all, tc.says) || (text && !strings.Contains(errOut.String(), "changesink: config:")) ||
				(!text && !strings.Contains(all, `"error_class":"config"`)) {
				t.Errorf("%s (text %v): exit %d, stdout:\n%s\nstderr:\n%s\nwant exit 2 saying %q, not showing %q",
					strings.Join(tc.args, " "), text, code, out.String(), errOut.String(), tc.says, word)
			}
		}
	}
}

// flagEnvs maps every flag name of the command tree to its env var(s).
func flagEnvs(parser *kong.Kong) map[string]string {
	envs := map[string]string{}
	var walk func(n *kong.Node)
	walk = func(n *kong.Node) {
		for _, f := range n.Flags {
			if len(f.Envs) > 0 {
				envs[f.Name] = strings.Join(f.Envs, " or ")
			}
		}
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(parser.Model.Node)
	return envs
}
