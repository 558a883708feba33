//go:build mpi

package dist_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/dist"
	"github.com/headroom-ml/headroom/internal/mpitest"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// Over MPI (mpirun -np 2 and 3), ZeRO-3 with gathers prefetched one layer
// ahead ends with the weights of no prefetch bit for bit, and each rank's
// planned peak equals its measured one, with and without prefetch.
func TestMPIZero3Prefetch(t *testing.T) {
	if mpitest.Mode() != "" {
		c := mpitest.Join(t)
		defer comm.Close(c)
		ctx := context.Background()
		batches := data(3)
		run := func(depth int) map[string][]float32 {
			dev := device.CPU()
			full := nn.NewStore()
			m := zoo.NewMLP(full.Root(), widths...)
			tr, z, err := dist.NewZero3Trainer(ctx, c, dev, full, m, zoo.CrossEntropyLoss, newOpt(t, "adam"), train.Config{}, dist.Zero3Options{Seed: 1, Prefetch: depth})
			if err != nil {
				t.Fatal(err)
			}
			defer z.Close()
			defer tr.Close()
			stepShares(t, ctx, c, tr, dev, batches, fmt.Sprintf("rank %d, prefetch %d", c.Rank(), depth))
			got := map[string][]float32{}
			for _, p := range full.Trainable() {
				v, err := z.Gather(ctx, p.Name)
				if err != nil {
					t.Fatal(err)
				}
				got[p.Name] = v.F32()
			}
			return got
		}
		want, got := run(0), run(1)
		for name, w := range want {
			for i, v := range got[name] {
				if math.Float32bits(v) != math.Float32bits(w[i]) {
					t.Fatalf("rank %d: %s[%d] = %v with prefetch, %v without", c.Rank(), name, i, v, w[i])
				}
			}
		}
		return
	}
	for _, n := range []int{2, 3} {
		if out, err := mpitest.Test(t, n, "TestMPIZero3Prefetch", "1"); err != nil {
			t.Fatalf("mpirun -np %d: %v\n%s", n, err, out)
		}
	}
}
