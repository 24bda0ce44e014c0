package errformat

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// module is the module whose files the test reads.
const module = "github.com/changesink/changesink"

// maxLen is the longest error format the module allows, in characters
// (runes), before the arguments are filled in.
const maxLen = 160

// TestErrorFormatsAreShort fails for every error format of the module's
// non-test Go files over maxLen characters, naming its file, line and
// length.
func TestErrorFormatsAreShort(t *testing.T) {
	formats := moduleFormats(t, moduleRoot(t))
	if len(formats) == 0 {
		t.Fatal("found no error format in the module: the walk is broken")
	}
	for _, f := range formats {
		if n := utf8.RuneCountInString(f.text); n > maxLen {
			t.Errorf("%s:%d: error format of %d characters, over %d: %s", f.file, f.line, n, maxLen, clip(f.text))
		}
	}
}

// TestFormatsOf pins what counts as an error format, on testdata/formats.go.
func TestFormatsOf(t *testing.T) {
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, filepath.Join("testdata", "formats.go"), nil, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, f := range formatsOf(fset, file, newPackage([]*ast.File{file})) {
		got[f.text] = true
	}
	tests := []struct {
		text string
		want bool
	}{
		{"errorf %d", true},
		{"errors new", true},
		{"folded errorf with a constant", true},
		{"aliased fmt", true},
		{"typed %q: %w", true},
		{"typed fprintf %d", true},
		{" (typed literal)", true},
		{"typed constant", true},
		{"wrapped: through a wrapper %d", true},
		{"wrapped: through a wrapper of a wrapper %d", true},
		{"sprintf outside an Error method", false},
		{"a literal outside an Error method", false},
		{"a String method", false},
	}
	for _, tt := range tests {
		if got[tt.text] != tt.want {
			t.Errorf("format %q found = %v, want %v (found: %v)", tt.text, got[tt.text], tt.want, got)
		}
	}
}

// format is one error format: its text and where it is.
type format struct {
	file string
	line int
	text string
}

// moduleRoot is the nearest folder above the working directory whose
// go.mod is module's.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(mod, []byte("module "+module+"\n")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("no go.mod of %s above the test's working directory", module)
		}
		dir = parent
	}
}

// moduleFormats returns the error formats of every non-test Go file under
// root, skipping testdata, hidden folders and nested modules, with paths
// relative to root.
func moduleFormats(t *testing.T, root string) []format {
	t.Helper()
	byDir := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path == root {
				return nil
			}
			if name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			byDir[filepath.Dir(path)] = append(byDir[filepath.Dir(path)], path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []format
	for _, dir := range slices.Sorted(maps.Keys(byDir)) {
		paths := byDir[dir]
		fset := token.NewFileSet()
		var files []*ast.File
		for _, path := range paths {
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
		pkg := newPackage(files)
		for _, f := range files {
			for _, ft := range formatsOf(fset, f, pkg) {
				if rel, err := filepath.Rel(root, ft.file); err == nil {
					ft.file = rel
				}
				out = append(out, ft)
			}
		}
	}
	return out
}

// pkg is what formatsOf needs to know of a file's package: its string
// constants and its error wrappers.
type pkg struct {
	consts map[string]string
	// wrappers are the package's functions that pass a format parameter
	// on to fmt.Errorf (or to another wrapper), by name: the position of
	// the parameter and the format around it.
	wrappers map[string]wrapper
}

// wrapper is a function f(..., format string, args ...any) that returns
// fmt.Errorf(prefix+format+suffix, args...), as propErr does.
type wrapper struct {
	arg            int
	prefix, suffix string
}

// newPackage reads the constants and the wrappers of a package's files.
func newPackage(files []*ast.File) *pkg {
	p := &pkg{consts: constants(files), wrappers: map[string]wrapper{}}
	// Each pass finds the wrappers of the wrappers the passes before found.
	for found := true; found; {
		found = false
		for _, f := range files {
			for _, decl := range f.Decls {
				fd, ok := decl.(*ast.FuncDecl)
				if !ok || fd.Recv != nil || fd.Body == nil {
					continue
				}
				if _, known := p.wrappers[fd.Name.Name]; known {
					continue
				}
				if w, ok := p.wrapperOf(f, fd); ok {
					p.wrappers[fd.Name.Name] = w
					found = true
				}
			}
		}
	}
	return p
}

// marker stands for a wrapper's format parameter while its format is folded.
const marker = "\x00format\x00"

// wrapperOf reports fd as a wrapper when one of its string parameters is
// passed, with constant text around it, as the format of fmt.Errorf or of
// a known wrapper.
func (p *pkg) wrapperOf(file *ast.File, fd *ast.FuncDecl) (wrapper, bool) {
	var params []string
	for _, field := range fd.Type.Params.List {
		names := field.Names
		if len(names) == 0 {
			names = []*ast.Ident{nil}
		}
		for _, n := range names {
			name := ""
			if id, ok := field.Type.(*ast.Ident); ok && id.Name == "string" && n != nil {
				name = n.Name
			}
			params = append(params, name)
		}
	}
	var (
		out   wrapper
		found bool
	)
	imports := importNames(file)
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		c, ok := n.(*ast.CallExpr)
		if !ok || found {
			return !found
		}
		inner, at, ok := p.formatArg(imports, c)
		if !ok || at >= len(c.Args) {
			return true
		}
		for i, name := range params {
			if name == "" {
				continue
			}
			consts := maps.Clone(p.consts)
			consts[name] = marker
			s, ok := fold(c.Args[at], consts)
			before, after, one := strings.Cut(s, marker)
			if ok && one && !strings.Contains(after, marker) {
				out, found = wrapper{arg: i, prefix: inner.prefix + before, suffix: after + inner.suffix}, true
				return false
			}
		}
		return true
	})
	return out, found
}

// formatArg reports a call whose argument at is an error format: of
// fmt.Errorf and errors.New (at 0), or of a wrapper, with the text the
// wrapper puts around it.
func (p *pkg) formatArg(imports map[string]string, c *ast.CallExpr) (wrapper, int, bool) {
	switch fun := c.Fun.(type) {
	case *ast.SelectorExpr:
		if x, ok := fun.X.(*ast.Ident); ok {
			switch imports[x.Name] + "." + fun.Sel.Name {
			case "fmt.Errorf", "errors.New":
				return wrapper{}, 0, true
			}
		}
	case *ast.Ident:
		if w, ok := p.wrappers[fun.Name]; ok {
			return w, w.arg, true
		}
	}
	return wrapper{}, 0, false
}

// importNames maps the local names of a file's imports to their paths.
func importNames(file *ast.File) map[string]string {
	out := map[string]string{}
	for _, imp := range file.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		name := path[strings.LastIndex(path, "/")+1:]
		if imp.Name != nil {
			name = imp.Name.Name
		}
		out[name] = path
	}
	return out
}

// constants returns the string constants the files declare, by name, as
// far as their values are literals and other constants of the files
// joined with +.
func constants(files []*ast.File) map[string]string {
	exprs := map[string]ast.Expr{}
	for _, f := range files {
		for _, decl := range f.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.CONST {
				continue
			}
			for _, spec := range gen.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i < len(vs.Values) {
						exprs[name.Name] = vs.Values[i]
					}
				}
			}
		}
	}
	out := map[string]string{}
	// Each pass resolves the constants whose parts the passes before did.
	for changed := true; changed; {
		changed = false
		for name, e := range exprs {
			if _, done := out[name]; done {
				continue
			}
			if s, ok := fold(e, out); ok {
				out[name] = s
				changed = true
			}
		}
	}
	return out
}

// fold returns the value of a string constant expression: literals,
// constants in consts, joined with + (in parentheses or not).
func fold(e ast.Expr, consts map[string]string) (string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(e.Value)
		return s, err == nil
	case *ast.Ident:
		s, ok := consts[e.Name]
		return s, ok
	case *ast.ParenExpr:
		return fold(e.X, consts)
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			return "", false
		}
		x, ok := fold(e.X, consts)
		if !ok {
			return "", false
		}
		y, ok := fold(e.Y, consts)
		return x + y, ok
	}
	return "", false
}

// formatsOf returns the error formats of file: the constant format of
// fmt.Errorf, errors.New and the package's wrappers of them everywhere
// (with the text a wrapper adds), and in an Error() string method every
// constant string it builds its message from (the formats of fmt.Sprintf
// and fmt.Fprintf among them).
func formatsOf(fset *token.FileSet, file *ast.File, p *pkg) []format {
	imports := importNames(file)
	var out []format
	add := func(e ast.Expr, around wrapper) bool {
		s, ok := fold(e, p.consts)
		if ok {
			pos := fset.Position(e.Pos())
			out = append(out, format{file: pos.Filename, line: pos.Line, text: around.prefix + s + around.suffix})
		}
		return ok
	}
	ast.Inspect(file, func(n ast.Node) bool {
		if fd, ok := n.(*ast.FuncDecl); ok && isErrorMethod(fd) {
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				e, ok := n.(ast.Expr)
				return !ok || !add(e, wrapper{})
			})
			return false
		}
		if c, ok := n.(*ast.CallExpr); ok {
			if around, at, ok := p.formatArg(imports, c); ok && at < len(c.Args) {
				add(c.Args[at], around)
			}
		}
		return true
	})
	return out
}

// isErrorMethod reports a method Error() string.
func isErrorMethod(fd *ast.FuncDecl) bool {
	if fd.Recv == nil || fd.Name.Name != "Error" || fd.Body == nil || fd.Type.Params.NumFields() != 0 {
		return false
	}
	res := fd.Type.Results
	if res.NumFields() != 1 {
		return false
	}
	id, ok := res.List[0].Type.(*ast.Ident)
	return ok && id.Name == "string"
}

// clip shortens a format for a failure message.
func clip(s string) string {
	const keep = 60
	if utf8.RuneCountInString(s) <= keep {
		return strconv.Quote(s)
	}
	return strconv.Quote(string([]rune(s)[:keep])) + "…"
}
