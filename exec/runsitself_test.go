package exec

import (
	"testing"

	"github.com/headroom-ml/headroom/op"
)

// The ops exec runs without a kernel are exactly those that declare
// op.KernelNone: a new kernel-less op must be taught to the executor, and
// an op the executor runs must not ask backends for a kernel.
func TestRunsItselfMatchesTraits(t *testing.T) {
	for _, p := range op.All() {
		if got, want := runsItself(p), p.Traits().Kernel == op.KernelNone; got != want {
			t.Errorf("%T (%s): exec runs it itself = %v, but it declares Kernel %v", p, p.Name(), got, p.Traits().Kernel)
		}
	}
}
