// Command changesink keeps read models current from change streams. It is run
// by Kestra flows in a Docker task runner: settings come from env vars (with
// flags that override them), results go to stdout as Kestra protocol lines and
// to output files, and the exit code tells Kestra how the run ended:
//
//	0 done; outputs written after the commit
//	1 refused: input or stored state is unsafe; nothing was changed
//	2 usage or configuration error
//	3 transient: a service unreachable, a timeout, a lost connection; nothing was
//	  committed unless the message says otherwise (README, Exit codes)
//	4 internal: an unexpected failure (please report it); see the README for
//	  what each job left
//
// This package is thin on purpose: it parses the command line, builds each
// task's Config, runs the task, prints the result through package kestra and
// maps the error to an exit code through package outcome.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/alecthomas/kong"

	"github.com/changesink/changesink/internal/kestra"
	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/redact"
	"github.com/changesink/changesink/tasks/cdc"
	"github.com/changesink/changesink/tasks/kafkastate"
)

// Stamped at build time with -ldflags "-X main.version=... -X main.commit=...".
var (
	version = "dev"
	commit  = "unknown"
)

// CLI is the whole command tree. Each leaf command has a Run(*app) error method.
type CLI struct {
	KafkaState kafkaStateCmd `cmd:"" name:"kafka-state" help:"Keep the latest JSON value per key of a compacted Kafka topic in PostgreSQL."`
	CDC        cdcCmd        `cmd:"" name:"cdc" help:"Apply Debezium change batches (Ion) from PostgreSQL to a ClickHouse ReplacingMergeTree."`
	Version    versionCmd    `cmd:"" help:"Print the version and the commit it was built from."`
	Help       helpCmd       `cmd:"" help:"Show help for a command."`

	LogLevel slog.Level `name:"log-level" env:"${EnvLogLevel}" default:"INFO" help:"Log level: DEBUG, INFO, WARN or ERROR."`
	Output   string     `name:"output" env:"${EnvOutput}" enum:"auto,kestra,text" default:"auto" help:"kestra: Kestra protocol lines on stdout (outputs, metrics, leveled logs); text: plain messages, warnings and errors on stderr; auto (default): text when stdout is a terminal, else kestra."`
	WorkDir  string     `name:"work-dir" env:"${EnvWorkingDir}" default:"." type:"existingdir" help:"Directory for input and output files (Kestra sets ${EnvWorkingDir})."`
}

// app is what every command's Run receives: the run's context, where to
// print, and the masker every secret the command reads must be added to.
type app struct {
	ctx  context.Context
	em   *kestra.Emitter
	log  *slog.Logger
	mask *redact.Masker
	// dir is the working directory: input files are resolved against it and
	// output files (Kestra's outputFiles) are written into it.
	dir kestra.Dir
}

type versionCmd struct{}

func (versionCmd) Run(a *app) error {
	return a.em.Plain(fmt.Sprintf("changesink %s (commit %s)", version, commit))
}

type helpCmd struct {
	Command []string `arg:"" optional:"" help:"The command to show help for."`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := runIO(ctx, os.Args[1:], stdio{out: os.Stdout, err: os.Stderr, terminal: isTerminal(os.Stdout), getenv: os.Getenv})
	stop()
	os.Exit(code)
}

// envOutput chooses text or Kestra lines (--output); it is read before the
// command line is parsed, so a parse error prints in the chosen form too.
const envOutput = "CHANGESINK_OUTPUT"

// envLogLevel sets --log-level.
const envLogLevel = "CHANGESINK_LOG_LEVEL"

// stdio is where a run prints, and what decides how.
type stdio struct {
	out, err io.Writer
	// terminal: out is a terminal, so a person reads it (--output=auto
	// then prints text).
	terminal bool
	getenv   func(string) string
}

// isTerminal reports whether f is a character device (a terminal). Kestra's
// task runners read stdout through a pipe, never a terminal.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// textOutput decides --output before the command line is parsed (a parse
// error is printed in the chosen form too): the last --output flag before
// "--", else CHANGESINK_OUTPUT, else auto. auto and unknown values (which the
// parser then refuses) print text only to a terminal.
func textOutput(args []string, s stdio) bool {
	mode := ""
	if s.getenv != nil {
		mode = s.getenv(envOutput)
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		if v, ok := strings.CutPrefix(a, "--output="); ok {
			mode = v
		} else if a == "--output" && i+1 < len(args) {
			mode = args[i+1]
			i++
		}
	}
	switch mode {
	case "text":
		return true
	case "kestra":
		return false
	}
	return s.terminal
}

// newParser builds the kong parser for cli; tests use it to inspect the
// commands and the env vars each reads.
func newParser(cli *CLI, stdout, stderr io.Writer, exit func(int)) (*kong.Kong, error) {
	return kong.New(cli,
		kong.Name("changesink"),
		kong.Description("Keep read models current from change streams, run from Kestra flows.\n\n"+
			"Exit codes: 0 done, 1 refused (unsafe input or state; nothing changed), 2 usage or configuration error, "+
			"3 transient (retry), 4 internal error."),
		kong.Writers(stdout, stderr),
		kong.Exit(exit),
		kong.UsageOnError(),
		kong.ConfigureHelp(kong.HelpOptions{Compact: true, FlagsLast: true}),
		kong.Vars{"EnvOutput": envOutput, "EnvLogLevel": envLogLevel, "EnvWorkingDir": kestra.EnvWorkingDir},
		kafkaStateVars(),
		cdcVars(),
	)
}

// runIO is main without the process: it returns the exit code.
func runIO(ctx context.Context, args []string, s stdio) int {
	mask := &redact.Masker{}
	em := kestra.NewEmitter(s.out, mask)
	kongErr := s.out // Kestra shows stdout as INFO, stderr as ERROR: usage goes to stdout
	if textOutput(args, s) {
		em, kongErr = kestra.NewTextEmitter(s.out, s.err, mask), s.err
	}
	var cli CLI
	exited := -1
	parser, err := newParser(&cli, s.out, kongErr, func(code int) { exited = code })
	if err != nil {
		return fail(em, outcome.Internal, fmt.Errorf("build command line: %w", err))
	}
	if len(args) == 0 {
		args = []string{"--help"}
	}
	kctx, err := parser.Parse(args)
	if exited >= 0 { // --help or a parse error already printed
		if exited == 0 {
			return 0
		}
		return outcome.Config.ExitCode()
	}
	if err != nil {
		// kong's message as it wrote it, but for a word that may be part
		// of a secret; the hint names the settings by their env vars.
		if hidden := hideUnexpectedArgument(parser, err); hidden != nil {
			err = hidden
		}
		return failHint(em, outcome.Config, err, parseHint(err))
	}
	if err := requireNonEmpty(kctx); err != nil {
		return failHint(em, outcome.Config, err, "Set them in the task's env (or pass the flags); `changesink help <command>` lists every setting and its env var.")
	}
	if kctx.Command() == "help" || kctx.Command() == "help <command>" {
		helpArgs := append(append([]string{}, cli.Help.Command...), "--help")
		exited = -1
		if _, err := parser.Parse(helpArgs); exited < 0 && err != nil {
			// No such command: kong stops at it before --help.
			if hidden := hideUnexpectedArgument(parser, err); hidden != nil {
				return fail(em, outcome.Config, fmt.Errorf("help: %w", hidden))
			}
			return fail(em, outcome.Config, fmt.Errorf("help: %w; `changesink help` lists the commands", err))
		}
		return 0
	}
	logger := slog.New(kestra.NewLogHandler(em, cli.LogLevel))
	a := &app{ctx: ctx, em: em, log: logger, mask: mask, dir: kestra.Dir{Path: cli.WorkDir}}
	if err := runCommand(kctx, a); err != nil {
		return fail(em, outcome.Classify(err), err)
	}
	return 0
}

// runCommand runs the parsed command and turns a panic into an internal
// error, so that a bug still exits 4 with error outputs (Go's own exit code
// for a panic is 2, which would read as a configuration error).
func runCommand(kctx *kong.Context, a *app) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("internal error (please report it): panic: %v\n%s", p, debug.Stack())
		}
	}()
	return kctx.Run(a)
}

// fail prints the error once, masked, as an ERROR log line and as
// error_class/error outputs (Kestra keeps outputs of a failed task, so a flow's
// errors branch can act on the class), with its hint (what to do, from the
// task's hints table) apart, and returns the exit code.
func fail(em *kestra.Emitter, kind outcome.Kind, err error) int {
	return failHint(em, kind, err, hint(err))
}

// failHint is fail with the hint given.
func failHint(em *kestra.Emitter, kind outcome.Kind, err error, hint string) int {
	_ = em.Fail(kind.String(), err.Error(), hint)
	return kind.ExitCode()
}

// hint is the remedy of err from the hints table of the task that failed:
// each table knows only its own task's errors.
func hint(err error) string {
	for _, h := range []func(error) string{cdc.Hint, kafkastate.Hint} {
		if s := h(err); s != "" {
			return s
		}
	}
	return ""
}

// errMissingSettings: required settings given as empty strings (an env
// var that is set but empty passes kong's own required check).
var errMissingSettings = errors.New("missing required settings")

// requireNonEmpty refuses a required setting given as an empty string,
// naming each by its env var (flows set env vars) and its flag.
func requireNonEmpty(kctx *kong.Context) error {
	var empty []string
	for _, f := range kctx.Flags() {
		if v, ok := kctx.FlagValue(f).(string); f.Required && ok && strings.TrimSpace(v) == "" {
			empty = append(empty, settingName(f))
		}
	}
	if len(empty) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", errMissingSettings, strings.Join(empty, ", "))
}

// settingName names a flag by its env var first (flows set env vars), then
// by the flag itself.
func settingName(f *kong.Flag) string {
	if len(f.Envs) == 0 {
		return "--" + f.Name
	}
	return strings.Join(f.Envs, " or ") + " (flag --" + f.Name + ")"
}

// parseHint is the hint of a command-line error, which kong's own message
// says: the required settings of the command it stopped at that are unset,
// by env var and flag (from the parse's context, not from the message's
// text), and where every setting is listed.
func parseHint(err error) string {
	const lists = "`changesink help <command>` lists every setting and its env var"
	if errors.Is(err, errUnexpectedArgument) {
		return "Check the command's spelling; quote a flag value that holds spaces, or pass secrets as env vars; " + lists + "."
	}
	var pe *kong.ParseError
	if !errors.As(err, &pe) || pe.Context == nil {
		return lists + "."
	}
	// A setting kong refused by name ("--work-dir: stat …: no such file"):
	// that one is to fix; kong stopped before it read the others.
	if name, _, ok := strings.Cut(err.Error(), ":"); ok && strings.HasPrefix(name, "--") {
		for _, f := range pe.Context.Flags() {
			if "--"+f.Name == name {
				return "Fix " + settingName(f) + ": the message says what is wrong with its value; " + lists + "."
			}
		}
	}
	var unset []string
	for _, f := range pe.Context.Flags() {
		if f.Required && !f.Set && !envSet(f) {
			unset = append(unset, settingName(f))
		}
	}
	if len(unset) == 0 {
		return lists + "."
	}
	return "Set " + strings.Join(unset, ", ") + " in the task's env (or pass the flags); " + lists + "."
}

// envSet reports whether one of f's env vars is set (kong may stop before
// it reads them).
func envSet(f *kong.Flag) bool {
	for _, e := range f.Envs {
		if os.Getenv(e) != "" {
			return true
		}
	}
	return false
}

// hideUnexpectedArgument rewrites kong's "unexpected argument WORD" without
// the word, which may be the rest of an unquoted secret ("--pg-password two
// words"): Kestra masks only whole secrets, and the mask here knows only the
// env's. It returns nil for any other parse error.
func hideUnexpectedArgument(parser *kong.Kong, err error) error {
	if !strings.HasPrefix(err.Error(), "unexpected argument ") {
		return nil
	}
	return fmt.Errorf("%w (not shown: it may be part of a secret) after %s", errUnexpectedArgument, commandsAt(parser, err))
}

// errUnexpectedArgument: a word on the command line that no flag or
// command takes (hideUnexpectedArgument); parseHint says what to do.
var errUnexpectedArgument = errors.New("unexpected argument")

// commandsAt names the command a parse error stopped at and, when it has
// subcommands, lists them (a misspelt one: "kafka-state materialise").
func commandsAt(parser *kong.Kong, err error) string {
	node := parser.Model.Node
	var pe *kong.ParseError
	if errors.As(err, &pe) && pe.Context != nil {
		if sel := pe.Context.Selected(); sel != nil {
			node = sel
		}
	}
	var names []string
	for _, c := range node.Children {
		if !c.Hidden {
			names = append(names, c.Name)
		}
	}
	if len(names) == 0 {
		return "`" + node.FullPath() + "`, which takes no arguments"
	}
	return "`" + node.FullPath() + "`, whose commands are " + strings.Join(names, ", ")
}
