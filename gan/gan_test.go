package gan_test

import (
	"context"
	"errors"
	"math/rand"
	"testing"

	"github.com/headroom-ml/headroom/budget"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/gan"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// small builds a small ESRGAN pair (RRDBNet nf 8, nb 2, gc 4; a
// discriminator of 4 features), checkpoint regions recorded, on dev.
func small(t *testing.T, dev *device.Device, cfg gan.Config) *gan.Trainer {
	t.Helper()
	gs, ds := nn.NewStore(), nn.NewStore()
	g := zoo.NewRRDBNet(gs.Root(), zoo.RRDBNetConfig{InNC: 3, OutNC: 3, NF: 8, NB: 2, GC: 4})
	g.Checkpoint = true
	d := zoo.NewVGGDisc(ds.Root(), zoo.VGGDiscConfig{InCh: 3, NumFeat: 4, InputSize: 128})
	d.Checkpoint = true
	for _, s := range []*nn.Store{gs, ds} {
		if err := s.Materialize(dev, 1); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Release)
	}
	adam := func() optim.Optimizer {
		o, err := optim.NewAdam(gan.ESRGANAdam())
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	tr, err := gan.New(dev, gan.Net{Model: g, Store: gs, Opt: adam()}, gan.Net{Model: d, Store: ds, Opt: adam()}, gan.Net{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Close)
	return tr
}

func images(r *rand.Rand, shape ...int) *tensor.Tensor {
	x := tensor.New(tensor.Float32, tensor.Shape(shape))
	v := x.F32()
	for i := range v {
		v[i] = r.Float32()
	}
	return x
}

// The plan of an iteration — persistent memory plus the larger of the two
// steps' arenas — is the allocator's measured peak over two iterations,
// on the cpu, for every configuration the planner weighs; and the meta
// device plans the same bytes.
func TestPlanEqualsMeasured(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	lq, gt := images(r, 2, 3, 32, 32), images(r, 2, 3, 128, 128)
	for _, c := range gan.Candidates() {
		t.Run(c.Precision.String()+"/"+c.Recompute.String(), func(t *testing.T) {
			cfg := gan.Config{Weights: gan.ESRGANWeights(), Step: c}
			meta := small(t, device.Meta(), cfg)
			mp, err := meta.Plan(train.MetaOf(lq), train.MetaOf(gt))
			if err != nil {
				t.Fatal(err)
			}
			dev := device.CPU()
			tr := small(t, dev, cfg)
			p, err := tr.Plan(train.MetaOf(lq), train.MetaOf(gt))
			if err != nil {
				t.Fatal(err)
			}
			if p != mp {
				t.Errorf("cpu plan %+v, meta plan %+v", p, mp)
			}
			for i := range 2 {
				l, err := tr.Step(context.Background(), lq, gt)
				if err != nil {
					t.Fatal(err)
				}
				if l.G <= 0 || l.D <= 0 || l.Perceptual != 0 {
					t.Errorf("iteration %d: losses %+v", i, l)
				}
			}
			st := dev.Alloc.Stats()
			if got := st.AllocatedBytes.Peak; got != p.Total() {
				t.Errorf("measured peak %d, planned %d (%+v)", got, p.Total(), p)
			}
			if got := st.ReservedBytes.Peak; got < p.Reserved() {
				t.Errorf("reserved peak %d, below the planned arena and persistent memory %d", got, p.Reserved())
			}
			if p.Generator.ArenaBytes == 0 || p.Discriminator.ArenaBytes == 0 {
				t.Errorf("a step without an arena: %+v", p)
			}
		})
	}
}

// Recomputing checkpoint regions and bf16-mixed each lower the planned
// peak of the small pair; Fit picks the fastest option that fits, and
// says when none does.
func TestFit(t *testing.T) {
	tr := small(t, device.Meta(), gan.Config{Weights: gan.ESRGANWeights()})
	lq := train.MetaOf(tensor.New(tensor.Float32, tensor.Shape{4, 3, 32, 32}))
	gt := train.MetaOf(tensor.New(tensor.Float32, tensor.Shape{4, 3, 128, 128}))
	base, opts, err := tr.Fit(1<<40, lq, gt, budget.DefaultCost)
	if err != nil {
		t.Fatal(err)
	}
	if len(opts) != len(gan.Candidates()) || base.Seconds != opts[0].Seconds {
		t.Fatalf("an unlimited budget chose %+v, not the fastest of %d", base, len(opts))
	}
	var fp32, regions int64
	for _, o := range opts {
		if o.Step == (train.Config{}) {
			fp32 = o.Plan.Total()
		}
		if o.Step == (train.Config{Recompute: train.Regions}) {
			regions = o.Plan.Total()
		}
	}
	if !(regions < fp32) {
		t.Errorf("checkpointing regions plans %d, nothing recomputed %d", regions, fp32)
	}
	least := opts[0].Plan.Total()
	for _, o := range opts {
		least = min(least, o.Plan.Total())
	}
	got, _, err := tr.Fit(least, lq, gt, budget.DefaultCost)
	if err != nil || got.Plan.Total() != least {
		t.Errorf("at the least memory of all options (%d): %+v, %v", least, got, err)
	}
	if _, _, err := tr.Fit(least-1, lq, gt, budget.DefaultCost); !errors.Is(err, gan.ErrBudget) {
		t.Errorf("under every option: %v, want ErrBudget", err)
	}
}

// Configurations a GAN step cannot run are refused up front.
func TestConfigRefused(t *testing.T) {
	for _, c := range []train.Config{{Accumulation: 2}, {OptimizerInBackward: true}, {Outputs: true}} {
		tr := small(t, device.Meta(), gan.Config{Weights: gan.ESRGANWeights()})
		if err := tr.SetConfig(gan.Config{Step: c}); !errors.Is(err, gan.ErrConfig) {
			t.Errorf("%+v: %v, want ErrConfig", c, err)
		}
	}
}
