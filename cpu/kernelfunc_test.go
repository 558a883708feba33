package cpu

import (
	"testing"

	"github.com/headroom-ml/headroom/backend"
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// Register takes kernels of both signatures: with the pool (which gets
// the backend's), and without (written before pools; they get none).
func TestAsKernelBothSignatures(t *testing.T) {
	p := parallel.NewPool(2)
	defer p.Close()
	var got *parallel.Pool
	var ran int
	withPool := func(pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, ws []byte) error {
		got = pool
		return nil
	}
	without := func(n *trace.Node, in, out []*tensor.Tensor, ws []byte) error {
		ran++
		return nil
	}
	for _, k := range []Kernel{asKernel(withPool), asKernel(Kernel(withPool))} {
		got = nil
		if err := k(p, nil, nil, nil, nil); err != nil || got != p {
			t.Fatalf("a pool kernel got pool %p, want %p (err %v)", got, p, err)
		}
	}
	for _, k := range []Kernel{asKernel(without), asKernel(backend.Kernel(without)), asKernel(Kernel(func(_ *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, ws []byte) error {
		return without(n, in, out, ws)
	}))} {
		if err := k(p, nil, nil, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	if ran != 3 {
		t.Fatalf("kernels without a pool ran %d times, want 3", ran)
	}
}
