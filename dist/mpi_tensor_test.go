//go:build mpi

package dist_test

import (
	"context"
	"math"
	"testing"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/dist"
	"github.com/headroom-ml/headroom/internal/mpitest"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// Over MPI (mpirun -np 2 and 3), each rank of the tensor-parallel GPT
// computes the single-device loss, its gradients are the single-device
// gradients' pieces (within float32 rounding), and its planned peak equals
// its measured one and the meta device's plan.
func TestMPITensorParallel(t *testing.T) {
	if mpitest.Mode() != "" {
		c := mpitest.Join(t)
		defer comm.Close(c)
		x, y := tpTokens(2, 8, tpConfig.VocabSize, 1), tpTokens(2, 8, tpConfig.VocabSize, 2)
		sd, losses, grads, _ := tpFull(t, tpConfig, nil, [][2]*tensor.Tensor{{x, y}})
		ctx := context.Background()
		dev := device.CPU()
		s := nn.NewStore()
		m, err := zoo.NewTPGPT(s.Root(), tpConfig, c.Rank(), c.Size())
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Materialize(dev, 0); err != nil {
			t.Fatal(err)
		}
		defer s.Release()
		if err := m.LoadFull(sd, true); err != nil {
			t.Fatal(err)
		}
		tr, err := dist.NewTensorTrainer(ctx, c, dev, s, m, zoo.GPTLoss, nil, train.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		mp, err := tr.Plan(train.MetaOf(x), train.MetaOf(y))
		if err != nil {
			t.Fatal(err)
		}
		meta, err := dist.PlanTensorGPT(dist.TensorGPT{Config: tpConfig, Rank: c.Rank(), Size: c.Size(), Batch: 2, Seq: 8})
		if err != nil {
			t.Fatal(err)
		}
		dev.Alloc.ResetPeak()
		l, err := tr.Step(ctx, x, y)
		if err != nil {
			comm.Abort(c, err)
		}
		if peak := dev.Alloc.MaxMemoryAllocated(); peak != mp.Total() || peak != meta.Total() {
			t.Errorf("rank %d: planned %d, meta plan %d, measured %d", c.Rank(), mp.Total(), meta.Total(), peak)
		}
		if math.Abs(l-losses[0]) > 1e-6*math.Abs(losses[0]) {
			t.Errorf("rank %d: loss %v, one device %v", c.Rank(), l, losses[0])
		}
		for _, p := range s.Trainable() {
			want, err := zoo.TPShard(p.Name, grads[p.Name], c.Rank(), c.Size())
			if err != nil {
				t.Fatal(err)
			}
			if d := maxRel(p.Grad, want); d > 1e-5 {
				t.Errorf("rank %d: gradient of %s differs from its piece of one device's by %.3g", c.Rank(), p.Name, d)
			}
		}
		return
	}
	for _, n := range []int{2, 3} {
		if out, err := mpitest.Test(t, n, "TestMPITensorParallel", "1"); err != nil {
			t.Fatalf("mpirun -np %d: %v\n%s", n, err, out)
		}
	}
}
