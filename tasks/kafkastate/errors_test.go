package kafkastate

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/changesink/changesink/internal/testenv"
)

// TestRunbookHasEveryHint: docs/runbook.md explains every error Hint knows
// in a section headed by its message, whose "What to do" is the hint the
// CLI prints, word for word: the two cannot drift apart.
func TestRunbookHasEveryHint(t *testing.T) {
	var hs []testenv.RunbookHint
	for _, h := range hints() {
		hs = append(hs, testenv.RunbookHint{Message: h.err.Error(), Text: h.text})
	}
	testenv.CheckHintsInRunbook(t, "kafka-state", hs)
}

// TestEverySentinelHasAHint: every sentinel errors.go declares has a
// remedy in the hints table, so no refusal reaches an operator without one.
func TestEverySentinelHasAHint(t *testing.T) {
	known := map[string]bool{}
	for _, h := range hints() {
		known[h.err.Error()] = true
	}
	for name, msg := range testenv.Sentinels(t, "errors.go") {
		if !known[msg] {
			t.Errorf("errors.go: %s (%q) has no hint", name, msg)
		}
	}
}

// TestOffsetPastEnd: a saved offset past the log's end is told apart from
// one below its start (issue 28): its message and hint name the causes
// that fit, not retention.
func TestOffsetPastEnd(t *testing.T) {
	tests := []struct {
		name    string
		err     *OffsetError
		pastEnd bool
	}{
		{"below the log start", &OffsetError{Topic: "t", Partition: 1, Saved: 5, LogStart: 10, End: 20}, false},
		{"past the log end", &OffsetError{Topic: "t", Partition: 1, Saved: 25, LogStart: 10, End: 20}, true},
		{"end unknown", &OffsetError{Topic: "t", Partition: 1, Saved: 25, LogStart: 10, End: -1}, false},
		{"fetched", &OffsetError{Topic: "t", Partition: 1, Saved: 25, LogStart: -1, End: -1, Fetched: true, FetchOffset: 25}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !errors.Is(tt.err, ErrOffsetOutOfRange) {
				t.Errorf("%v does not wrap ErrOffsetOutOfRange", tt.err)
			}
			if got := errors.Is(tt.err, ErrOffsetPastEnd); got != tt.pastEnd {
				t.Errorf("errors.Is(ErrOffsetPastEnd) = %v, want %v", got, tt.pastEnd)
			}
			if got := strings.HasSuffix(tt.err.Error(), ErrOffsetPastEnd.Error()); got != tt.pastEnd {
				t.Errorf("message %q: ends with %q = %v, want %v", tt.err, ErrOffsetPastEnd, got, tt.pastEnd)
			}
			if got := strings.Contains(Hint(tt.err), "retention"); got == tt.pastEnd {
				t.Errorf("hint %q names retention = %v", Hint(tt.err), got)
			}
		})
	}
}

// TestDocNamesEveryError: the package doc (doc.go) names every sentinel of
// errors.go and every exported error type, so its list of what a run can
// fail with stays complete as errors are added.
func TestDocNamesEveryError(t *testing.T) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var (
		files []*ast.File
		doc   string
	)
	for _, entry := range entries {
		name := entry.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
		if name == "doc.go" {
			doc = strings.Join(strings.Fields(f.Doc.Text()), " ")
		}
	}
	if doc == "" {
		t.Fatal("doc.go has no package comment")
	}
	names := slices.Collect(maps.Keys(testenv.Sentinels(t, "errors.go")))
	for _, f := range files {
		for _, decl := range f.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.TYPE {
				continue
			}
			for _, spec := range gen.Specs {
				ts := spec.(*ast.TypeSpec)
				if ts.Name.IsExported() && strings.HasSuffix(ts.Name.Name, "Error") {
					names = append(names, "*"+ts.Name.Name)
				}
			}
		}
	}
	slices.Sort(names)
	for _, name := range names {
		if !regexp.MustCompile(`(^|[^\w*])` + regexp.QuoteMeta(name) + `\b`).MatchString(doc) {
			t.Errorf("doc.go does not name %s", name)
		}
	}
}
