package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/dataset"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/dist"
	"github.com/headroom-ml/headroom/internal/testkit"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// `headroom plan --ranks N --zero 3 --gather-prefetch D` prints each
// rank's measured peak under ZeRO-3 with D layers' gathers ahead, to the
// byte, for D = 0, 1, 2 (in-process ranks running the trainer mpirun's
// ranks run).
func TestPlanRanksGatherPrefetchPrinted(t *testing.T) {
	for _, c := range []struct {
		model        string
		ranks, batch int
	}{{"mlp", 2, 5}, {"mlp", 3, 5}, {"cnn", 2, 4}} {
		spec, err := zoo.Lookup(c.model)
		if err != nil {
			t.Fatal(err)
		}
		x, y := testkit.SpecBatch(spec, c.batch, 1)
		var base map[int]int64
		for _, depth := range []int{0, 1, 2} {
			t.Run(fmt.Sprintf("%s/ranks=%d/depth=%d", c.model, c.ranks, depth), func(t *testing.T) {
				printed, _ := printedPeaks(t, c.ranks, "--model", c.model, "--batch-size", fmt.Sprint(c.batch), "--zero", "3", "--gather-prefetch", fmt.Sprint(depth))
				if depth == 0 {
					base = printed
				} else {
					t.Logf("rank 0 planned %d, %d without prefetch", printed[0], base[0])
				}
				var mu sync.Mutex
				err := comm.Run(context.Background(), c.ranks, func(ctx context.Context, cm comm.Comm) error {
					dev := device.CPU()
					opt, err := newOptimizer("adam", 1e-3, -1)
					if err != nil {
						return err
					}
					s := nn.NewStore()
					tr, z, err := dist.NewZero3Trainer(ctx, cm, dev, s, spec.New(s.Root()), spec.Loss, opt, train.Config{}, dist.Zero3Options{Seed: 1, Prefetch: depth})
					if err != nil {
						return err
					}
					defer z.Close()
					defer tr.Close()
					part, err := dist.ShardBatch(train.Batch{X: x, Y: y}, cm.Rank(), cm.Size())
					if err != nil {
						return err
					}
					for range 2 {
						dev.Alloc.ResetPeak()
						if _, err := tr.Step(ctx, part.X, part.Y); err != nil {
							return err
						}
					}
					mu.Lock()
					defer mu.Unlock()
					if peak := dev.Alloc.MaxMemoryAllocated(); peak != printed[cm.Rank()] {
						t.Errorf("rank %d: measured peak %d, printed plan %d", cm.Rank(), peak, printed[cm.Rank()])
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// `train --zero 3 --gather-prefetch 1` on in-process ranks saves the
// weights of `--gather-prefetch 0` bit for bit; the flag is refused
// outside ZeRO 3 by train and by plan --ranks.
func TestTrainRanksGatherPrefetch(t *testing.T) {
	t.Setenv(dataset.EnvDir, "")
	dir := t.TempDir()
	base := trainFlags{model: "mlp", epochs: 1, batch: 8, lr: 1e-2, optimizer: "adam", device: "cpu", seed: 1, limit: 32, steps: 3, recompute: "none"}
	base.dist.zero = 3
	saved := map[int]string{}
	for _, depth := range []int{0, 1} {
		f := base
		f.dist.gatherPrefetch = depth
		f.save = filepath.Join(dir, fmt.Sprintf("prefetch%d.safetensors", depth))
		if out, err := trainRanks(t, 2, f); err != nil {
			t.Fatalf("--gather-prefetch %d: %v\n%s", depth, err, out)
		}
		saved[depth] = f.save
	}
	want, have := loadSaved(t, "mlp", saved[0]), loadSaved(t, "mlp", saved[1])
	for name, w := range want {
		for k, v := range w.F32() {
			if math.Float32bits(v) != math.Float32bits(have[name].F32()[k]) {
				t.Fatalf("%s[%d]: %v with prefetch, %v without", name, k, have[name].F32()[k], v)
			}
		}
	}
	f := base
	f.dist.zero, f.dist.gatherPrefetch = 2, 1
	if _, err := trainRanks(t, 2, f); err == nil || !strings.Contains(err.Error(), "--gather-prefetch 1: only with --zero 3") {
		t.Errorf("train --zero 2 --gather-prefetch 1: %v", err)
	}
	var out bytes.Buffer
	for _, args := range [][]string{{"--zero", "2"}, {}} {
		err := planMain(context.Background(), append([]string{"--ranks", "2", "--model", "mlp", "--gather-prefetch", "1"}, args...), &out, &out)
		if err == nil || !strings.Contains(err.Error(), "only with --zero 3") {
			t.Errorf("plan --ranks 2 --gather-prefetch 1 %v: %v", args, err)
		}
	}
}
