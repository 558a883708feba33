//go:build mpi

package dist_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/dist"
	"github.com/headroom-ml/headroom/internal/mpitest"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// Over MPI (mpirun -np 2 and 3), ZeRO-3 ends with one process's weights
// (within 1e-5), each rank's parameters are its shards as its allocator
// counts them, and its planned peak equals its measured one.
func TestMPIZero3(t *testing.T) {
	if mpitest.Mode() != "" {
		c := mpitest.Join(t)
		defer comm.Close(c)
		batches := data(3)
		want, _ := single(t, "adam", batches)
		ctx := context.Background()
		dev := device.CPU()
		full := nn.NewStore()
		m := zoo.NewMLP(full.Root(), widths...)
		tr, z, err := dist.NewZero3Trainer(ctx, c, dev, full, m, zoo.CrossEntropyLoss, newOpt(t, "adam"), train.Config{}, dist.Zero3Options{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer z.Close()
		defer tr.Close()
		stepShares(t, ctx, c, tr, dev, batches, fmt.Sprintf("rank %d", c.Rank()))
		got := map[string][]float32{}
		var shards int64
		for _, p := range full.Trainable() {
			v, err := z.Gather(ctx, p.Name)
			if err != nil {
				t.Fatal(err)
			}
			got[p.Name] = v.F32()
			shards += device.RoundSize(int64(prim.ShardLen(int(p.Numel()), c.Size())) * 4)
		}
		if d := relDiff(got, want); d > 1e-5 {
			t.Errorf("rank %d: weights differ from one process's by %.3g relative", c.Rank(), d)
		}
		if b := dev.Alloc.Stats().ByCategory[device.Parameter]; b != shards {
			t.Errorf("rank %d: parameter bytes %d, want the shards' %d", c.Rank(), b, shards)
		}
		return
	}
	for _, n := range []int{2, 3} {
		if out, err := mpitest.Test(t, n, "TestMPIZero3", "1"); err != nil {
			t.Fatalf("mpirun -np %d: %v\n%s", n, err, out)
		}
	}
}
