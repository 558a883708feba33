package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/dist"
	"github.com/headroom-ml/headroom/internal/testkit"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// Each rank's measured peak equals the peak `headroom plan --ranks`
// printed for it, to the byte, under ZeRO 3 (the mlp, 2 and 3 ranks
// sharing 5 samples unevenly) and tensor parallelism (nanoGPT's
// shakespeare_char model on 2 and 3 ranks, the whole batch on each),
// in-process ranks running the trainers mpirun's ranks would run.
func TestPlanRanksZero3TensorPrinted(t *testing.T) {
	cases := []struct {
		model         string
		ranks, tensor int
		batch         int
	}{
		{"mlp", 2, 1, 5},
		{"mlp", 3, 1, 5},
		{"gpt-shakespeare-char", 2, 2, 1},
		{"gpt-shakespeare-char", 3, 3, 1},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/ranks=%d/tensor=%d", c.model, c.ranks, c.tensor), func(t *testing.T) {
			if testing.Short() && c.ranks == 3 && c.tensor > 1 {
				t.Skip("-short")
			}
			args := []string{"--model", c.model, "--batch-size", fmt.Sprint(c.batch)}
			if c.tensor > 1 {
				args = append(args, "--tensor", fmt.Sprint(c.tensor))
			} else {
				args = append(args, "--zero", "3")
			}
			printed, _ := printedPeaks(t, c.ranks, args...)
			spec, err := zoo.Lookup(c.model)
			if err != nil {
				t.Fatal(err)
			}
			x, y := testkit.SpecBatch(spec, c.batch, 1)
			peaksEqualPrinted(t, c.ranks, printed, func(ctx context.Context, cm comm.Comm, dev *device.Device, opt optim.Optimizer, release func(func())) (*train.Trainer, train.Batch, error) {
				part := train.Batch{X: x, Y: y}
				s := nn.NewStore()
				if c.tensor > 1 {
					cfg, err := dist.TensorGPTConfig(dist.Job{Build: testkit.Build(spec)})
					if err != nil {
						return nil, part, err
					}
					m, err := zoo.NewTPGPT(s.Root(), cfg, cm.Rank(), cm.Size())
					if err != nil {
						return nil, part, err
					}
					if err := s.Materialize(dev, 1); err != nil {
						return nil, part, err
					}
					release(s.Release)
					tr, err := dist.NewTensorTrainer(ctx, cm, dev, s, m, spec.Loss, opt, train.Config{})
					if err != nil {
						return nil, part, err
					}
					release(tr.Close)
					return tr, part, nil
				}
				tr, z, err := dist.NewZero3Trainer(ctx, cm, dev, s, spec.New(s.Root()), spec.Loss, opt, train.Config{}, dist.Zero3Options{Seed: 1})
				if err != nil {
					return nil, part, err
				}
				release(z.Close)
				release(tr.Close)
				part, err = dist.ShardBatch(part, cm.Rank(), cm.Size())
				return tr, part, err
			})
		})
	}
}

// --budget without --zero or --tensor tries ZeRO 3 and, for a GPT whose
// heads split over the ranks, tensor parallelism, and chooses the fitting
// layout that sends the fewest bytes: on a batch of 2 sequences, the
// all-reduces of activations move less than those of the gradients.
func TestPlanRanksBudgetTriesZero3Tensor(t *testing.T) {
	var out strings.Builder
	err := planMain(context.Background(), []string{"--ranks", "2", "--model", "gpt-shakespeare-char", "--batch-size", "2", "--budget", "64GiB"}, &out, &out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"2 ranks, ZeRO 3 ", "2 ranks, ZeRO 0, tensor parallel 2 ", "chosen: 2 ranks, ZeRO 0, tensor parallel 2\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	// With clipping, ZeRO 3 is not tried (it needs every gradient whole).
	if err := planMain(context.Background(), []string{"--ranks", "2", "--model", "mlp", "--budget", "64GiB", "--clip-grad", "1"}, &out, &out); err != nil || strings.Contains(out.String(), "ZeRO 3") {
		t.Errorf("--clip-grad: %v\n%s", err, out.String())
	}
}
