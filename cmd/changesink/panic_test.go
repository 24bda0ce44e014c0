package main

import (
	"bytes"
	"context"
	"errors"
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
