package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/alecthomas/kong"

	"github.com/changesink/changesink/internal/kestra"
	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/redact"
)

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
	if err == nil || !strings.Contains(err.Error(), "panic: boom") {
		t.Fatalf("runCommand = %v, want the panic as an error", err)
	}
	if got := outcome.Classify(err); got != outcome.Internal {
		t.Fatalf("Classify = %v, want internal", got)
	}
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

// Flows set env vars, not flags: a missing required setting names its env var.
func TestMissingFlagNamesItsEnvVar(t *testing.T) {
	for _, name := range []string{"CDC_MAPPING", "CLICKHOUSE_URL"} {
		t.Setenv(name, "x") // registers the restore
		os.Unsetenv(name)
	}
	var out bytes.Buffer
	code := run(context.Background(), []string{"cdc", "apply"}, &out)
	if code != 2 {
		t.Fatalf("exit code = %d, want 2; output:\n%s", code, out.String())
	}
	for _, want := range []string{"--mapping is env CDC_MAPPING", "--clickhouse-url is env CLICKHOUSE_URL", `"error_class":"config"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
