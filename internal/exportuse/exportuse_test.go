package exportuse

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// module is the module whose files the test reads.
const module = "github.com/changesink/changesink"

// exempt are the module's packages that exist to serve the tests of other
// packages: that most of their names are used by tests alone is their
// purpose.
var exempt = map[string]bool{
	module + "/internal/testenv":   true, // what the integration tests share
	module + "/internal/kafkatest": true, // Kafka test helpers
	module + "/internal/iongen":    true, // Debezium events for cdc's tests (and bench/cdc)
}

// api are exported names that are part of their package's API although
// only the tests of other packages name them, each with the reason.
var api = map[string]string{
	module + "/tasks/cdc/mapping.Parse":     "mapping's parser of a mapping's text; Load reads a file into it, and the rooms' tests build their mappings with it",
	module + "/tasks/cdc/mapping.ParseSet":  "the same for a mapping set (LoadSet)",
	module + "/tasks/cdc.ExpectedFile":      "an output file of cdc apply: the name the flows list in outputFiles, which cmd's flow tests hold them to",
	module + "/tasks/cdc.PendingFile":       "the same",
	module + "/tasks/kafkastate.ReportFile": "the output file of kafka-state materialize, as above",
}

// TestNoExportOnlyForOtherTests fails for every exported package-level name
// of the module that only the tests of other packages use, naming it and
// where they use it.
func TestNoExportOnlyForOtherTests(t *testing.T) {
	pkgs, err := readModule(moduleRoot(t), module)
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 10 {
		t.Fatalf("read %d packages of the module: the walk is broken", len(pkgs))
	}
	for name := range api {
		if !declared(pkgs, name) {
			t.Errorf("api lists %s, which the module does not declare: take it off the list", name)
		}
	}
	found, err := testOnly(pkgs, api)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		if exempt[f.pkg] {
			continue
		}
		uses := f.uses
		if len(uses) > 3 {
			uses = append(uses[:3:3], fmt.Sprintf("%d more", len(f.uses)-3))
		}
		t.Errorf("%s.%s is exported only for the tests of other packages (%s): move them beside it, or make them use the real API, and unexport it",
			strings.TrimPrefix(f.pkg, module+"/"), f.name, strings.Join(uses, ", "))
	}
}

// TestTestOnly pins what counts as a name used only by other packages'
// tests, on the small module in testdata/mod.
func TestTestOnly(t *testing.T) {
	const mod = "example.com/mod"
	pkgs, err := readModule(filepath.Join("testdata", "mod"), mod)
	if err != nil {
		t.Fatal(err)
	}
	found, err := testOnly(pkgs, map[string]string{mod + "/lib.Listed": "the test's API list"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, f := range found {
		got[strings.TrimPrefix(f.pkg, mod+"/")+"."+f.name] = true
	}
	tests := []struct {
		name string
		want bool
	}{
		{"lib.OnlyOtherTests", true},
		{"lib.OnlyOtherExternalTests", true},
		{"lib.OnlyOtherTestsType", true},
		{"lib.OnlyOtherTestsVar", true},
		{"lib.OnlyThroughAlias", true},
		{"lib.ShadowedInCode", true}, // the code's lib is a parameter
		{"lib.UsedByCode", false},    // app's code
		{"lib.UsedByCodeAndTests", false},
		{"lib.InMain", false},       // a package main is code too
		{"lib.OnlyOwnTests", false}, // lib's own tests
		{"lib.OnlyOwnExternalTests", false},
		{"lib.Unused", false},     // no test needs it
		{"lib.Result", false},     // Run, which app calls, returns it
		{"lib.Field", false},      // an exported field of Result
		{"lib.Answer", false},     // a method of Result returns it
		{"lib.Hidden", true},      // only an unexported field of Result mentions it
		{"lib.KindB", false},      // a value of Kind, which Classify returns
		{"lib.ErrRefused", false}, // a sentinel: callers match it with errors.Is
		{"lib.Listed", false},     // on the API list
		{"lib.OnlyInAMethodOfATestOnlyType", true},
		{"lib.UsedWithinLib", true}, // lib's own code uses it too
	}
	for _, tt := range tests {
		if got[tt.name] != tt.want {
			t.Errorf("%s reported = %v, want %v (reported: %v)", tt.name, got[tt.name], tt.want, slices.Sorted(maps.Keys(got)))
		}
	}
	if !declared(pkgs, mod+"/lib.Listed") || declared(pkgs, mod+"/lib.Nothing") {
		t.Errorf("declared: wrong for lib.Listed or lib.Nothing")
	}
}

// pkg is one folder of the module: its import path, its files, and the
// exported package-level names its non-test files declare.
type pkg struct {
	path  string
	files []file
	fset  *token.FileSet
	decls map[string]*decl
	// methods are the exported methods of the package's types, by the
	// type's name.
	methods map[string][]*ast.FuncDecl
}

// decl is an exported package-level name: its declaration, and for a
// constant of a named type of the package, the type.
type decl struct {
	node      ast.Node // *ast.FuncDecl, *ast.TypeSpec or *ast.ValueSpec
	isVar     bool
	constType string
}

// file is one parsed Go file of a package and whether it is a test's.
type file struct {
	name string
	ast  *ast.File
	test bool
}

// finding is an exported name of pkg that only other packages' tests use:
// uses are the files and lines.
type finding struct {
	pkg, name string
	uses      []string
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

// readModule parses every Go file under root, the folder of the module
// modPath, skipping testdata, vendor, hidden folders and nested modules,
// as one pkg per folder, with file names relative to root.
func readModule(root, modPath string) ([]*pkg, error) {
	fset := token.NewFileSet()
	byDir := map[string]*pkg{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p == root {
				return nil
			}
			if name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		// Object resolution tells a package's name from a parameter or
		// variable of the same name (target, slot).
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		pk := byDir[dir]
		if pk == nil {
			pk = &pkg{path: path.Join(modPath, dir), fset: fset, decls: map[string]*decl{}, methods: map[string][]*ast.FuncDecl{}}
			byDir[dir] = pk
		}
		test := strings.HasSuffix(name, "_test.go")
		pk.files = append(pk.files, file{name: filepath.ToSlash(rel), ast: f, test: test})
		if !test && f.Name.Name != "main" {
			pk.declare(f)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the module's files: %w", err)
	}
	return slices.SortedFunc(maps.Values(byDir), func(a, b *pkg) int { return strings.Compare(a.path, b.path) }), nil
}

// declare records the exported constants, variables, types, functions and
// methods a non-test file of pk declares.
func (pk *pkg) declare(f *ast.File) {
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			switch {
			case !d.Name.IsExported():
			case d.Recv == nil:
				pk.decls[d.Name.Name] = &decl{node: d}
			default:
				if recv := receiverType(d.Recv.List[0].Type); recv != "" {
					pk.methods[recv] = append(pk.methods[recv], d)
				}
			}
		case *ast.GenDecl:
			var typ string // a constant group's type, carried by iota's repeats
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						pk.decls[s.Name.Name] = &decl{node: s}
					}
				case *ast.ValueSpec:
					if d.Tok == token.CONST && (s.Type != nil || len(s.Values) > 0) {
						typ = ""
						if id, ok := s.Type.(*ast.Ident); ok {
							typ = id.Name
						}
					}
					for _, n := range s.Names {
						if n.IsExported() {
							pk.decls[n.Name] = &decl{node: s, isVar: d.Tok == token.VAR, constType: typ}
						}
					}
				}
			}
		}
	}
}

// receiverType is the name of a method's receiver type: T of T, *T, T[P].
func receiverType(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return receiverType(e.X)
	case *ast.IndexExpr:
		return receiverType(e.X)
	case *ast.IndexListExpr:
		return receiverType(e.X)
	case *ast.Ident:
		return e.Name
	}
	return ""
}

// declared reports whether qualified, "<import path>.<Name>", is an
// exported name of pkgs.
func declared(pkgs []*pkg, qualified string) bool {
	dot := strings.LastIndex(qualified, ".")
	for _, pk := range pkgs {
		if pk.path == qualified[:dot] {
			return pk.decls[qualified[dot+1:]] != nil
		}
	}
	return false
}

// surface returns the package's exported names that name's API mentions:
// a function's signature, a type's definition (of a struct, its exported
// fields) and its exported methods' signatures, a variable's or constant's
// type and value, and the constants of a type.
func (pk *pkg) surface(name string) []string {
	d := pk.decls[name]
	var nodes []ast.Node
	switch n := d.node.(type) {
	case *ast.FuncDecl:
		nodes = append(nodes, n.Type)
	case *ast.TypeSpec:
		if n.TypeParams != nil {
			nodes = append(nodes, n.TypeParams)
		}
		if st, ok := n.Type.(*ast.StructType); ok {
			for _, f := range st.Fields.List {
				if len(f.Names) == 0 || slices.ContainsFunc(f.Names, (*ast.Ident).IsExported) {
					nodes = append(nodes, f.Type)
				}
			}
		} else {
			nodes = append(nodes, n.Type)
		}
		for _, m := range pk.methods[name] {
			nodes = append(nodes, m.Type)
		}
	case *ast.ValueSpec:
		if n.Type != nil {
			nodes = append(nodes, n.Type)
		}
		for _, v := range n.Values {
			nodes = append(nodes, v)
		}
	}
	var out []string
	for _, n := range nodes {
		ast.Inspect(n, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.SelectorExpr: // another package's name, or a field or method
				ast.Inspect(n.X, func(n ast.Node) bool {
					if id, ok := n.(*ast.Ident); ok && pk.decls[id.Name] != nil {
						out = append(out, id.Name)
					}
					return true
				})
				return false
			case *ast.KeyValueExpr: // a field's name is not the package's
				if _, ok := n.Key.(*ast.Ident); ok {
					ast.Inspect(n.Value, func(n ast.Node) bool {
						if id, ok := n.(*ast.Ident); ok && pk.decls[id.Name] != nil {
							out = append(out, id.Name)
						}
						return true
					})
					return false
				}
			case *ast.Ident:
				if pk.decls[n.Name] != nil {
					out = append(out, n.Name)
				}
			}
			return true
		})
	}
	for c, d := range pk.decls {
		if d.constType == name {
			out = append(out, c)
		}
	}
	return out
}

// use is one reference to an exported package-level name of another
// folder's package.
type use struct {
	pkg, name string
	test      bool
	at        string
}

// usesOf returns a file's references to the exported names of the module's
// packages, p.Name through the file's import of p. An identifier the parser
// resolved to a declaration of the file (a variable named like a package)
// is not a package. A dot import of a module package is an error: its uses
// cannot be told from the file's own names.
func usesOf(fset *token.FileSet, f file, byPath map[string]*pkg) ([]use, error) {
	named := map[string]*pkg{}
	for _, imp := range f.ast.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		pk := byPath[p]
		switch {
		case pk == nil:
		case imp.Name == nil:
			named[packageName(pk)] = pk
		case imp.Name.Name == ".":
			return nil, fmt.Errorf("read the uses of %s: file %s dot-imports it", p, f.name)
		case imp.Name.Name != "_":
			named[imp.Name.Name] = pk
		}
	}
	var out []use
	ast.Inspect(f.ast, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); ok && x.Obj == nil {
			if pk := named[x.Name]; pk != nil && pk.decls[sel.Sel.Name] != nil {
				at := fmt.Sprintf("%s:%d", f.name, fset.Position(sel.Pos()).Line)
				out = append(out, use{pkg: pk.path, name: sel.Sel.Name, test: f.test, at: at})
			}
		}
		return true
	})
	return out, nil
}

// packageName is the name a package's non-test files declare.
func packageName(pk *pkg) string {
	for _, f := range pk.files {
		if !f.test {
			return f.ast.Name.Name
		}
	}
	return path.Base(pk.path)
}

// testOnly returns, in order, the exported names of pkgs that tests of
// other packages use and that are not their package's API. The API is what
// other packages' non-test code uses, the sentinel errors (Err…, which
// callers match), the names listed in apiList ("<import path>.<Name>"), and
// whatever the exported surface of those mentions (surface).
func testOnly(pkgs []*pkg, apiList map[string]string) ([]finding, error) {
	byPath := map[string]*pkg{}
	for _, pk := range pkgs {
		byPath[pk.path] = pk
	}
	type key struct{ pkg, name string }
	isAPI := map[key]bool{}
	var queue []key
	reach := func(k key) {
		if !isAPI[k] {
			isAPI[k] = true
			queue = append(queue, k)
		}
	}
	inTests := map[key][]string{}
	for _, pk := range pkgs {
		for name, d := range pk.decls {
			_, listed := apiList[pk.path+"."+name]
			if listed || (d.isVar && strings.HasPrefix(name, "Err")) {
				reach(key{pk.path, name})
			}
		}
		for _, f := range pk.files {
			uses, err := usesOf(pk.fset, f, byPath)
			if err != nil {
				return nil, err
			}
			for _, u := range uses {
				if u.pkg == pk.path {
					continue // its own package's (internal or external) tests
				}
				k := key{u.pkg, u.name}
				if u.test {
					inTests[k] = append(inTests[k], u.at)
				} else {
					reach(k)
				}
			}
		}
	}
	for len(queue) > 0 {
		k := queue[0]
		queue = queue[1:]
		for _, name := range byPath[k.pkg].surface(k.name) {
			reach(key{k.pkg, name})
		}
	}
	var out []finding
	for _, k := range slices.SortedFunc(maps.Keys(inTests), func(a, b key) int {
		return strings.Compare(a.pkg+"."+a.name, b.pkg+"."+b.name)
	}) {
		if !isAPI[k] {
			out = append(out, finding{pkg: k.pkg, name: k.name, uses: inTests[k]})
		}
	}
	return out, nil
}
