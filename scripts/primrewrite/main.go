// Command primrewrite rewrites references to package op's IR names into
// package prim's: op.Binary becomes prim.Binary, op.Apply1 prim.Apply1, and
// the imports follow (prim added, op dropped once unused). It is the
// mechanical step of the op/prim split (docs/layout.md), re-runnable on
// code written against the old layout, such as a branch merged after it.
//
//	go run ./scripts/primrewrite [-n] [dir ...]
//
// Each dir is walked recursively (default "."; testdata, vendor and hidden
// directories are skipped). -n lists what would change and writes nothing.
//
// Two rules, by where the file is:
//
//   - Non-test files of a package that may not import op (every package but
//     those in mayImportOp, the list op's TestImportsOfOp checks): every
//     op.X that prim declares becomes prim.X, the functional API included
//     (op.Add becomes prim.Add, the same function). An op.X that prim does
//     not declare is reported and the command exits 1: that code calls the
//     model-facing API and needs a hand-made change.
//   - Every other file (model code, train, commands, all tests): op.X
//     becomes prim.X only where op no longer declares X, so op's API and
//     the option structs op re-exports (op.ConvOpts) stay as written.
//
// Comments of files that import op or prim follow the second rule (a doc
// comment naming op.Fused comes to name prim.Fused).
//
// The names are read from the source of op and prim in this module, so
// the command follows them as they change.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

const (
	module   = "github.com/headroom-ml/headroom"
	opPath   = module + "/op"
	primPath = module + "/prim"
)

// mayImportOp lists the packages whose non-test code may import op: op,
// the model layer, train (it builds the loss), the commands and the helpers
// that build models for tests and benchmarks. Keep it equal to the list in
// op/imports_test.go.
var mayImportOp = []string{
	"op", "nn", "zoo", "train", "gan", "pipeline",
	"cmd/...",
	"internal/check", "internal/testkit", "internal/bench",
}

func allowed(rel string) bool {
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

func main() {
	dry := flag.Bool("n", false, "list the changes, write nothing")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: go run ./scripts/primrewrite [-n] [dir ...]")
		flag.PrintDefaults()
	}
	flag.Parse()
	root, err := moduleRoot()
	if err != nil {
		fatal(err)
	}
	primNames, err := declared(filepath.Join(root, "prim"))
	if err != nil {
		fatal(err)
	}
	opNames, err := declared(filepath.Join(root, "op"))
	if err != nil {
		fatal(err)
	}
	dirs := flag.Args()
	if len(dirs) == 0 {
		dirs = []string{"."}
	}
	r := &rewriter{root: root, prim: primNames, op: opNames, dry: *dry}
	for _, d := range dirs {
		if err := r.walk(d); err != nil {
			fatal(err)
		}
	}
	fmt.Printf("primrewrite: %d references in %d files rewritten\n", r.refs, r.files)
	if len(r.problems) > 0 {
		sort.Strings(r.problems)
		for _, p := range r.problems {
			fmt.Fprintln(os.Stderr, p)
		}
		os.Exit(1)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "primrewrite:", err)
	os.Exit(2)
}

// moduleRoot is the nearest directory upward holding this module's go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(b, []byte("module "+module+"\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside module " + module)
		}
		dir = parent
	}
}

// declared returns the top-level names the non-test Go files of dir
// declare (methods excluded).
func declared(dir string) (map[string]bool, error) {
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, d := range file.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					names[d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						names[s.Name.Name] = true
					case *ast.ValueSpec:
						for _, n := range s.Names {
							names[n.Name] = true
						}
					}
				}
			}
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%s declares nothing", dir)
	}
	return names, nil
}

type rewriter struct {
	root     string
	prim, op map[string]bool
	dry      bool

	files, refs int
	problems    []string
}

func (r *rewriter) walk(dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			n := d.Name()
			if path != dir && (n == "testdata" || n == "vendor" || strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		return r.file(path)
	})
}

func (r *rewriter) file(path string) error {
	src, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
	if err != nil {
		return err
	}
	var opSpec *ast.ImportSpec
	hasPrim := false
	for _, s := range f.Imports {
		p, _ := strconv.Unquote(s.Path.Value)
		switch p {
		case opPath:
			opSpec = s
		case primPath:
			hasPrim = true
			if s.Name != nil {
				return fmt.Errorf("%s: prim is imported under the name %s; rename it by hand", path, s.Name.Name)
			}
		}
	}
	if opSpec == nil && !hasPrim {
		return nil
	}
	opName := "op"
	if opSpec != nil && opSpec.Name != nil {
		opName = opSpec.Name.Name
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(r.root, filepath.Dir(abs))
	if err != nil {
		return err
	}
	rel = filepath.ToSlash(rel)
	strict := !strings.HasSuffix(path, "_test.go") && !allowed(rel)

	var at []edit // the op identifiers to replace, in source order
	left := 0     // op references kept
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok || opSpec == nil {
			return true
		}
		id, ok := sel.X.(*ast.Ident)
		// Obj is nil for a package name: a local variable called op is
		// resolved to its declaration and left alone.
		if !ok || id.Name != opName || id.Obj != nil {
			return true
		}
		name := sel.Sel.Name
		switch {
		case strict && r.prim[name]:
		case strict:
			r.problems = append(r.problems, fmt.Sprintf("%s: %s.%s: package %s may not import op, and prim has no %s", fset.Position(sel.Pos()), opName, name, rel, name))
			left++
			return true
		case r.prim[name] && !r.op[name]:
		default:
			left++
			return true
		}
		at = append(at, edit{fset.Position(id.Pos()).Offset, len(opName)})
		return true
	})
	code := len(at)
	// Comments of files that use the IR name it as the code does: op.X
	// becomes prim.X where op no longer declares X.
	for _, cg := range f.Comments {
		for _, c := range cg.List {
			base := fset.Position(c.Pos()).Offset
			for i := 0; ; {
				j := strings.Index(c.Text[i:], "op.")
				if j < 0 {
					break
				}
				j += i
				i = j + 3
				if j > 0 && (isIdent(c.Text[j-1]) || c.Text[j-1] == '.' || c.Text[j-1] == '/') {
					continue
				}
				k := i
				for k < len(c.Text) && isIdent(c.Text[k]) {
					k++
				}
				name := c.Text[i:k]
				if name != "" && ast.IsExported(name) && r.prim[name] && !r.op[name] {
					at = append(at, edit{base + j, 2})
				}
			}
		}
	}
	if len(at) == 0 {
		return nil
	}
	sort.Slice(at, func(i, j int) bool { return at[i].off < at[j].off })
	out := make([]byte, 0, len(src)+len(at)*4)
	last := 0
	for _, e := range at {
		out = append(out, src[last:e.off]...)
		out = append(out, "prim"...)
		last = e.off + e.n
	}
	out = append(out, src[last:]...)
	if code > 0 {
		start, end := fset.Position(opSpec.Pos()).Offset, fset.Position(opSpec.End()).Offset
		for _, e := range at { // comment edits above the imports shift them
			if e.off < start {
				start += len("prim") - e.n
				end += len("prim") - e.n
			}
		}
		out, err = fixImports(out, start, end, left == 0, !hasPrim)
		if err != nil {
			return fmt.Errorf("%s: %v", path, err)
		}
	}
	if out, err = format.Source(out); err != nil {
		return fmt.Errorf("%s: %v", path, err)
	}
	r.files++
	r.refs += len(at)
	fmt.Printf("%s: %d\n", path, len(at))
	if r.dry {
		return nil
	}
	return os.WriteFile(path, out, 0o644)
}

// fixImports adds prim's import next to op's (spec at [start, end) in src)
// and drops op's when unused.
func fixImports(src []byte, start, end int, dropOp, addPrim bool) ([]byte, error) {
	primSpec := strconv.Quote(primPath)
	lineStart := bytes.LastIndexByte(src[:start], '\n') + 1
	lineEnd := end + bytes.IndexByte(src[end:], '\n') + 1
	if lineEnd <= end {
		return nil, errors.New("import of op is on the last line")
	}
	line := string(src[lineStart:lineEnd])
	block := !strings.HasPrefix(strings.TrimSpace(line), "import")
	var repl string
	switch {
	case block && dropOp && addPrim:
		repl = line[:start-lineStart] + primSpec + "\n"
	case block && dropOp:
		repl = ""
	case block && addPrim:
		repl = line + line[:start-lineStart] + primSpec + "\n"
	case block:
		repl = line
	case dropOp && addPrim: // import ".../op"
		repl = "import " + primSpec + "\n"
	case dropOp:
		repl = ""
	case addPrim:
		repl = "import (\n\t" + string(src[start:end]) + "\n\t" + primSpec + "\n)\n"
	default:
		repl = line
	}
	return append(append(append([]byte{}, src[:lineStart]...), repl...), src[lineEnd:]...), nil
}

// edit replaces n bytes at off (an op) with prim.
type edit struct{ off, n int }

func isIdent(b byte) bool {
	return b == '_' || '0' <= b && b <= '9' || 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z'
}
