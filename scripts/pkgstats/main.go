// Command pkgstats prints, for every package of the module, its non-test Go
// lines and its exported identifiers: the measurement docs/layout.md records
// before and after a layout change (issue 10).
//
//	go run ./scripts/pkgstats [dir]
//
// Every non-test .go file counts whatever its build constraints (the amd64
// and portable variants of a kernel are both code a reader meets). Exported
// identifiers are top-level exported funcs, types, consts and vars, plus
// exported methods; fields are not counted.
package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

type stats struct {
	files, lines, exported, methods int
}

func main() {
	root := "."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	byDir := map[string]*stats{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			// testdata and dot/underscore directories are not packages to the go tool.
			if path != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		dir, _ := filepath.Rel(root, filepath.Dir(path))
		s := byDir[dir]
		if s == nil {
			s = &stats{}
			byDir[dir] = s
		}
		s.files++
		s.lines += bytes.Count(src, []byte("\n"))
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				if !decl.Name.IsExported() {
					continue
				}
				if decl.Recv != nil {
					s.methods++
				} else {
					s.exported++
				}
			case *ast.GenDecl:
				for _, spec := range decl.Specs {
					switch spec := spec.(type) {
					case *ast.TypeSpec:
						if spec.Name.IsExported() {
							s.exported++
						}
					case *ast.ValueSpec:
						for _, n := range spec.Names {
							if n.IsExported() {
								s.exported++
							}
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "pkgstats:", err)
		os.Exit(1)
	}
	dirs := make([]string, 0, len(byDir))
	for d := range byDir {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	var total stats
	fmt.Println("| package | files | lines | exported | exported methods |")
	fmt.Println("|---|---:|---:|---:|---:|")
	for _, d := range dirs {
		s := byDir[d]
		fmt.Printf("| %s | %d | %d | %d | %d |\n", filepath.ToSlash(d), s.files, s.lines, s.exported, s.methods)
		total.files += s.files
		total.lines += s.lines
		total.exported += s.exported
		total.methods += s.methods
	}
	fmt.Printf("| total | %d | %d | %d | %d |\n", total.files, total.lines, total.exported, total.methods)
}
