package device

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// untaggedTags returns the places in f where a device.Tag is written
// without its Category: the zero Category is Parameter, so such an
// allocation would be counted, summarized and blamed as a parameter.
func untaggedTags(fset *token.FileSet, f *ast.File) []string {
	var bad []string
	ast.Inspect(f, func(n ast.Node) bool {
		lit, ok := n.(*ast.CompositeLit)
		if !ok {
			return true
		}
		sel, ok := lit.Type.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "Tag" {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "device" {
			return true
		}
		named := false
		for _, e := range lit.Elts {
			kv, ok := e.(*ast.KeyValueExpr)
			if !ok {
				named = true // positional: Category comes first
				break
			}
			if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Category" {
				named = true
			}
		}
		if !named {
			bad = append(bad, fset.Position(lit.Pos()).String())
		}
		return true
	})
	return bad
}

// Every device.Tag the module's code outside this package writes names its
// category (tests may leave it out). The zero category is Parameter; none
// of today's callers relies on that, and none may by accident.
func TestTagsNameTheirCategory(t *testing.T) {
	for _, c := range []struct {
		src  string
		want int
	}{
		{`package p; var _ = device.Tag{Category: device.Gradient, Op: "w"}`, 0},
		{`package p; var _ = device.Tag{device.Input, "m", "x"}`, 0},
		{`package p; var _ = device.Tag{Op: "arena"}`, 1},
		{`package p; var _ = device.Tag{}`, 1},
		{`package p; var _ = other.Tag{}`, 0},
	} {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, "x.go", c.src, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := untaggedTags(fset, f); len(got) != c.want {
			t.Errorf("%s: %v, want %d", c.src, got, c.want)
		}
	}
	root := ".."
	fset := token.NewFileSet()
	var bad []string
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
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		bad = append(bad, untaggedTags(fset, f)...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) > 0 {
		t.Errorf("device.Tag without a Category (it would count as a parameter): %s", strings.Join(bad, ", "))
	}
}
