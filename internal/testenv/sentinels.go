package testenv

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Sentinels returns the message of every package-level sentinel in the Go
// file path, by name: each `ErrX = errors.New("message")` of its var
// declarations. A test that must cover every sentinel reads the list from
// the code, so a new sentinel is covered without anyone remembering to add
// it.
func Sentinels(t testing.TB, path string) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	out := map[string]string{}
	for _, decl := range f.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.VAR {
			continue
		}
		for _, spec := range gen.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if msg, ok := errorsNew(vs.Values, i); ok && strings.HasPrefix(name.Name, "Err") {
					out[name.Name] = msg
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s declares no sentinel (ErrX = errors.New(...))", path)
	}
	return out
}

// errorsNew returns the message of values[i] when it is a call X.New with
// one string literal, as errors.New("message").
func errorsNew(values []ast.Expr, i int) (string, bool) {
	if i >= len(values) {
		return "", false
	}
	call, ok := values[i].(*ast.CallExpr)
	if !ok || len(call.Args) != 1 {
		return "", false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	lit, isLit := call.Args[0].(*ast.BasicLit)
	if !ok || sel.Sel.Name != "New" || !isLit || lit.Kind != token.STRING {
		return "", false
	}
	msg, err := strconv.Unquote(lit.Value)
	return msg, err == nil
}

// runbookMessages returns what docs/runbook.md says of job between its
// markers <!-- RUNBOOK:job --> and <!-- /RUNBOOK:job -->, with each table
// row cut to its first cell (the error message the row explains): the
// messages an on-call engineer can look up there.
func runbookMessages(t testing.TB, job string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root(t), "docs", "runbook.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, runbook, found := strings.Cut(string(raw), "<!-- RUNBOOK:"+job+" -->")
	runbook, _, closed := strings.Cut(runbook, "<!-- /RUNBOOK:"+job+" -->")
	if !found || !closed {
		t.Fatalf("docs/runbook.md has no <!-- RUNBOOK:%s --> ... <!-- /RUNBOOK:%s --> section", job, job)
	}
	var out strings.Builder
	for _, line := range strings.Split(runbook, "\n") {
		if c := strings.Split(line, "|"); len(c) > 2 && strings.HasPrefix(line, "|") {
			line = c[1]
		}
		out.WriteString(line + "\n")
	}
	return out.String()
}

// CheckRunbook fails t for every sentinel (name to message, as Sentinels
// returns) whose message's first words, up to a " (" that starts its
// remedy, the runbook of job (docs/runbook.md) does not quote in
// backquotes: an on-call engineer looks an error up there by its first words.
func CheckRunbook(t testing.TB, job string, sentinels map[string]string) {
	t.Helper()
	runbook := runbookMessages(t, job)
	for _, name := range slices.Sorted(maps.Keys(sentinels)) {
		words, _, _ := strings.Cut(sentinels[name], " (")
		if !strings.Contains(runbook, "`"+words+"`") {
			t.Errorf("the %s runbook (docs/runbook.md) has no row for %s (%q)", job, name, words)
		}
	}
}

// RunbookHint is one entry of a task's hints table: the message of the
// error it matches and the remedy the CLI prints.
type RunbookHint struct{ Message, Text string }

// CheckHintsInRunbook fails t for every hint that docs/runbook.md, between
// the markers <!-- RUNBOOK:job --> and <!-- /RUNBOOK:job -->, does not
// explain in a section of its own: a heading "### `Message`" followed by
// the paragraph "**What to do:** Text", the hint word for word. An on-call
// engineer looks the error up by its first words, and reads there the
// remedy the CLI printed.
func CheckHintsInRunbook(t testing.TB, job string, hints []RunbookHint) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root(t), "docs", "runbook.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, runbook, found := strings.Cut(string(raw), "<!-- RUNBOOK:"+job+" -->")
	runbook, _, closed := strings.Cut(runbook, "<!-- /RUNBOOK:"+job+" -->")
	if !found || !closed {
		t.Fatalf("docs/runbook.md has no <!-- RUNBOOK:%s --> ... <!-- /RUNBOOK:%s --> section", job, job)
	}
	sections := map[string]string{}
	for _, s := range strings.Split(runbook, "\n### ")[1:] {
		head, body, _ := strings.Cut(s, "\n")
		sections[head] = body
	}
	for _, h := range hints {
		body, ok := sections["`"+h.Message+"`"]
		switch {
		case !ok:
			t.Errorf("docs/runbook.md (%s) has no section ### `%s`", job, h.Message)
		case !strings.Contains(strings.Join(strings.Fields(body), " "), "**What to do:** "+h.Text):
			t.Errorf("docs/runbook.md (%s), section `%s`: its **What to do:** is not the hint %q", job, h.Message, h.Text)
		}
	}
}
