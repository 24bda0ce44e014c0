package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
)

var update = flag.Bool("update", false, "rewrite docs/reference.md from the command line's model")

// TestReferenceIsCurrent: docs/reference.md is the command reference
// rendered from the kong model (every command, flag, env var, default and
// help text), so it cannot fall behind the binary; go test -run
// TestReferenceIsCurrent -update rewrites it.
func TestReferenceIsCurrent(t *testing.T) {
	var cli CLI
	parser, err := newParser(&cli, io.Discard, io.Discard, func(int) {})
	if err != nil {
		t.Fatal(err)
	}
	got := reference(parser)
	path := filepath.Join("..", "..", "docs", "reference.md")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != got {
		t.Errorf("docs/reference.md is not the reference the command line renders; run: go test ./cmd/changesink -run TestReferenceIsCurrent -update")
	}
}

// reference renders the command reference as Markdown.
func reference(parser *kong.Kong) string {
	var b strings.Builder
	b.WriteString("# Command reference\n\n")
	b.WriteString("Generated from the command line's model (`go test ./cmd/changesink -run TestReferenceIsCurrent -update`);\n")
	b.WriteString("`changesink help <command>` prints the same. Every setting comes from an env var (the names the seed flows\n")
	b.WriteString("pass); a flag overrides it. A value that does not parse is a configuration error, never a silent default.\n\n")
	b.WriteString("## Global settings\n\n")
	flagTable(&b, parser.Model.Node.Flags)
	var walk func(n *kong.Node)
	walk = func(n *kong.Node) {
		for _, c := range n.Children {
			if c.Hidden {
				continue
			}
			if len(c.Children) == 0 {
				fmt.Fprintf(&b, "## `changesink %s`\n\n%s\n\n", c.Path(), c.Help)
				if len(c.Flags) > 0 {
					flagTable(&b, c.Flags)
				}
				continue
			}
			walk(c)
		}
	}
	walk(parser.Model.Node)
	return b.String()
}

// flagTable renders flags as a list: env var, flag, default (or
// required), meaning.
func flagTable(b *strings.Builder, flags []*kong.Flag) {
	for _, f := range flags {
		if f.Hidden || f.Name == "help" {
			continue
		}
		b.WriteString("- ")
		for _, env := range f.Envs {
			b.WriteString("`" + env + "`, ")
		}
		fmt.Fprintf(b, "`--%s`", f.Name)
		switch {
		case f.Required:
			b.WriteString(" (required)")
		case f.Default != "":
			fmt.Fprintf(b, " (default `%s`)", f.Default)
		}
		fmt.Fprintf(b, ": %s\n", f.Help)
	}
	b.WriteString("\n")
}
