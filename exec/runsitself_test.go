package exec

import (
	"testing"

	"github.com/headroom-ml/headroom/prim"
)

// The ops exec runs without a kernel are exactly those that declare
// prim.KernelNone: a new kernel-less op must be taught to the executor, and
// an op the executor runs must not ask backends for a kernel.
func TestRunsItselfMatchesTraits(t *testing.T) {
	for _, p := range prim.All() {
		if got, want := runsItself(p), p.Traits().Kernel == prim.KernelNone; got != want {
			t.Errorf("%T (%s): exec runs it itself = %v, but it declares Kernel %v", p, p.Name(), got, p.Traits().Kernel)
		}
	}
}
