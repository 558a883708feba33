package op_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// mayImportOp lists the packages whose non-test code may import op (the
// model-facing API): op, the model layer, train (it builds the loss),
// pipeline (it runs the zoo models' blocks as stages), the
// commands and the helpers that build models for tests and benchmarks.
// Everything else (autodiff, transform, schedule, plan, exec, the backends,
// budget, ...) works on the IR and imports prim. scripts/primrewrite keeps
// the same list (TestAllowListMatchesOpTest there keeps them equal).
var mayImportOp = []string{
	"op", "nn", "zoo", "train", "gan", "pipeline",
	"cmd/...",
	"internal/check", "internal/testkit", "internal/bench",
}

func mayImport(rel string) bool {
	for _, a := range mayImportOp {
		if p, ok := strings.CutSuffix(a, "/..."); ok {
			if rel == p || strings.HasPrefix(rel, p+"/") {
				return true
			}
		} else if rel == a {
			return true
		}
	}
	return false
}

// opImporters returns the packages under root (module path mod) whose
// non-test files import pkg but may not import op, "dir: file" each.
func opImporters(t *testing.T, root, mod, pkg string) []string {
	t.Helper()
	var bad []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (n == "testdata" || strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if mayImport(rel) {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, s := range f.Imports {
			if p, _ := strconv.Unquote(s.Path.Value); p == mod+"/"+pkg {
				bad = append(bad, rel+": "+filepath.Base(path))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return bad
}

const module = "github.com/headroom-ml/headroom"

// TestImportsOfOp: below the model layer only train imports op; the
// passes, the executor, the backends and the budget planner import prim.
func TestImportsOfOp(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "prim")); err != nil {
		t.Fatalf("module root %s has no prim: %v", root, err)
	}
	for _, b := range opImporters(t, root, module, "op") {
		t.Errorf("%s imports op; import prim instead (go run ./scripts/primrewrite rewrites op.X to prim.X)", b)
	}
	// The walk is not vacuous: it finds the IR packages' imports of prim.
	if got := opImporters(t, root, module, "prim"); !slices.Contains(got, "autodiff: autodiff.go") {
		t.Errorf("prim importers outside the allowed list = %v, want autodiff's among them", got)
	}
}

// TestImportsOfOpReports: a package below nn importing op is reported, in
// non-test code only; the allowed packages are not.
func TestImportsOfOpReports(t *testing.T) {
	root := t.TempDir()
	for path, src := range map[string]string{
		"exec/exec.go":       "package exec\n\nimport \"" + module + "/op\"\n\nvar _ = op.Add\n",
		"exec/exec_test.go":  "package exec\n\nimport \"" + module + "/op\"\n\nvar _ = op.Add\n",
		"nn/nn.go":           "package nn\n\nimport \"" + module + "/op\"\n\nvar _ = op.Add\n",
		"cmd/x/main.go":      "package main\n\nimport \"" + module + "/op\"\n\nvar _ = op.Add\n",
		"transform/remat.go": "package transform\n\nimport \"" + module + "/prim\"\n\nvar _ = prim.Add\n",
	} {
		p := filepath.Join(root, filepath.FromSlash(path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := opImporters(t, root, module, "op"), []string{"exec: exec.go"}; !slices.Equal(got, want) {
		t.Errorf("reported %q, want %q", got, want)
	}
}

// TestNoNodeTypesInOp: op declares no node type (a type with a Name
// method); node types belong in prim, where TestRegistry checks their
// traits.
func TestNoNodeTypesInOp(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv != nil && fd.Name.Name == "Name" {
				t.Errorf("%s: a node type's Name method in op; node types live in package prim (docs/adding-ops.md)", fset.Position(fd.Pos()))
			}
		}
	}
}
