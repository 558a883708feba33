package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const header = "module " + module + "\n\ngo 1.26\n"

// TestRewrite runs the rewrite on a small module: strict files take
// every name prim declares, others only names op no longer declares,
// comments follow, imports follow, and a second run changes nothing.
func TestRewrite(t *testing.T) {
	root := t.TempDir()
	imp := func(ps ...string) string {
		var b strings.Builder
		b.WriteString("import (\n")
		for _, p := range ps {
			b.WriteString("\t\"" + module + "/" + p + "\"\n")
		}
		return b.String() + ")\n"
	}
	files := map[string]string{
		"go.mod":       header,
		"prim/prim.go": "package prim\n\ntype Binary struct{}\n\ntype ConvOpts struct{}\n\nfunc Add() {}\n",
		"op/op.go":     "package op\n\n" + imp("prim") + "\ntype ConvOpts = prim.ConvOpts\n\nfunc Add() { prim.Add() }\n\nfunc ReLU() {}\n",
		// strict: below op, non-test
		"cpu/k.go": "package cpu\n\n" + imp("op") + "\n// k runs op.Binary.\nvar k = op.Binary{}\n\nfunc f() { op.Add() }\n",
		// tests may keep op's API
		"cpu/k_test.go": "package cpu\n\n" + imp("op") + "\nvar _ = op.Binary{}\n\nfunc g() { op.Add() }\n",
		// model code keeps op's API and the option aliases
		"nn/nn.go": "// Package nn is built on op.Add and op.Binary.\npackage nn\n\n" + imp("op") + "\nvar c op.ConvOpts\n\nvar b = op.Binary{}\n\nfunc h() { op.Add() }\n",
		// strict, calls what prim lacks
		"exec/bad.go": "package exec\n\n" + imp("op") + "\nfunc r() { op.ReLU() }\n",
		// a local variable called op is not the package
		"autodiff/local.go": "package autodiff\n\n" + imp("op") + "\nfunc l() {\n\top := struct{ Binary int }{}\n\t_ = op.Binary\n}\n\nfunc m() { op.Add() }\n",
	}
	for p, s := range files {
		full := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func() *rewriter {
		t.Helper()
		pn, err := declared(filepath.Join(root, "prim"))
		if err != nil {
			t.Fatal(err)
		}
		on, err := declared(filepath.Join(root, "op"))
		if err != nil {
			t.Fatal(err)
		}
		r := &rewriter{root: root, prim: pn, op: on}
		if err := r.walk(root); err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := run()
	want := map[string]string{
		"cpu/k.go":          "package cpu\n\nimport (\n\t\"" + module + "/prim\"\n)\n\n// k runs prim.Binary.\nvar k = prim.Binary{}\n\nfunc f() { prim.Add() }\n",
		"cpu/k_test.go":     "package cpu\n\nimport (\n\t\"" + module + "/op\"\n\t\"" + module + "/prim\"\n)\n\nvar _ = prim.Binary{}\n\nfunc g() { op.Add() }\n",
		"nn/nn.go":          "// Package nn is built on op.Add and prim.Binary.\npackage nn\n\nimport (\n\t\"" + module + "/op\"\n\t\"" + module + "/prim\"\n)\n\nvar c op.ConvOpts\n\nvar b = prim.Binary{}\n\nfunc h() { op.Add() }\n",
		"exec/bad.go":       files["exec/bad.go"],
		"autodiff/local.go": "package autodiff\n\nimport (\n\t\"" + module + "/prim\"\n)\n\nfunc l() {\n\top := struct{ Binary int }{}\n\t_ = op.Binary\n}\n\nfunc m() { prim.Add() }\n",
	}
	for p, w := range want {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(p)))
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != w {
			t.Errorf("%s:\n%s\nwant\n%s", p, b, w)
		}
	}
	if len(r.problems) != 1 || !strings.Contains(r.problems[0], "bad.go") || !strings.Contains(r.problems[0], "op.ReLU") {
		t.Errorf("problems = %q, want one naming exec/bad.go's op.ReLU", r.problems)
	}
	if r = run(); r.files != 0 {
		t.Errorf("second run rewrote %d files, want 0", r.files)
	}
}

// The allow-list here and the one op's TestImportsOfOp checks are two
// copies (a test file cannot be imported): they must stay equal, or the
// tool rewrites code the test then refuses, or the reverse.
func TestAllowListMatchesOpTest(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "..", "op", "imports_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := parser.ParseFile(token.NewFileSet(), "imports_test.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var theirs []string
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Names) != 1 || vs.Names[0].Name != "mayImportOp" || len(vs.Values) != 1 {
			return true
		}
		for _, e := range vs.Values[0].(*ast.CompositeLit).Elts {
			s, _ := strconv.Unquote(e.(*ast.BasicLit).Value)
			theirs = append(theirs, s)
		}
		return false
	})
	if !slices.Equal(theirs, mayImportOp) {
		t.Errorf("op/imports_test.go allows %q, primrewrite %q: keep them equal", theirs, mayImportOp)
	}
}
