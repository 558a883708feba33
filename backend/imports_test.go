package backend_test

import (
	"go/build"
	"path/filepath"
	"slices"
	"testing"
)

// The executor and every stage before it reach kernels only through the
// device's backend: none of them imports a backend implementation.
func TestPipelineImportsNoBackend(t *testing.T) {
	const mod = "github.com/headroom-ml/headroom/"
	impls := []string{mod + "cpu", mod + "backend/ref"}
	for _, pkg := range []string{"trace", "autodiff", "transform", "schedule", "plan", "exec"} {
		p, err := build.ImportDir(filepath.Join("..", pkg), 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range append(p.Imports, p.TestImports...) {
			if slices.Contains(impls, imp) {
				t.Errorf("package %s imports %s; it must reach kernels through device.Device.Backend", pkg, imp)
			}
		}
	}
}
