package transform_test

import (
	"context"
	"math/rand"
	"strconv"
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/internal/testkit"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/transform"
)

// deep is a chain of Linear → LayerNorm-free GELU → dropout blocks, with an
// optional checkpointing of the chain into segments.
type deep struct {
	layers   []*nn.Linear
	head     *nn.Linear
	segments int // 0: no checkpoint regions
}

func newDeep(s *nn.Store, depth, width, segments int) *deep {
	m := &deep{segments: segments}
	for i := 0; i < depth; i++ {
		m.layers = append(m.layers, nn.NewLinear(s.Root().Sub("blocks").Sub(strconv.Itoa(i)), width, width, true))
	}
	m.head = nn.NewLinear(s.Root().Sub("head"), width, 3, true)
	return m
}

func (m *deep) Forward(x *trace.Tensor) *trace.Tensor {
	var fns []func(*trace.Tensor) *trace.Tensor
	for i, l := range m.layers {
		fns = append(fns, func(h *trace.Tensor) *trace.Tensor {
			return op.Dropout(op.GELU(l.Forward(h), "none"), 0.1, true, uint64(i))
		})
	}
	var h *trace.Tensor
	if m.segments != 0 {
		h = nn.CheckpointSequential(x, m.segments, fns...)
	} else {
		h = x
		for _, f := range fns {
			h = f(h)
		}
	}
	return m.head.Forward(h)
}

func ce(out, y *trace.Tensor) *trace.Tensor {
	return op.CrossEntropy(out, y, op.DefaultCrossEntropyOpts())
}

type result struct {
	loss   float64
	grads  map[string][]float32
	peak   int64 // planned activation bytes at the peak
	copies int
}

func run(t *testing.T, segments int, policy transform.Policy) result {
	t.Helper()
	s := nn.NewStore()
	m := newDeep(s, 8, 64, segments)
	dev := device.CPU()
	if err := s.Materialize(dev, 7); err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	opt, _ := optim.NewSGD(optim.SGDConfig{LR: 0.1})
	tr, err := train.New(dev, s, m, ce, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if err := tr.SetConfig(train.Config{Recompute: train.MustRecompute(policy), GradientBuffers: true}); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewSource(3))
	x, y := testkit.Classification(r, tensor.Shape{32, 64}, 3)
	mp, err := tr.Plan(trace.Meta{DType: x.DType, Shape: x.Shape}, trace.Meta{DType: y.DType, Shape: y.Shape})
	if err != nil {
		t.Fatal(err)
	}
	loss, err := tr.Step(context.Background(), x, y)
	if err != nil {
		t.Fatal(err)
	}
	if got := dev.Alloc.MaxMemoryAllocated(); got != mp.Total() {
		t.Errorf("measured peak %d, planned %d", got, mp.Total())
	}
	res := result{loss: loss, grads: map[string][]float32{}, peak: mp.Activations}
	for _, p := range s.Trainable() {
		res.grads[p.Name] = append([]float32(nil), p.Grad.F32()...)
	}
	prog, _ := tr.TrainProgram(trace.Meta{DType: x.DType, Shape: x.Shape}, trace.Meta{DType: y.DType, Shape: y.Shape})
	for _, n := range prog.Graph.Nodes {
		if n.Recompute {
			res.copies++
		}
	}
	return res
}

// Recomputation changes memory, never numbers: loss and every gradient are
// bit-identical (dropout masks are reproduced), and the activation peak falls.
func TestRematerializationIsExactAndSavesMemory(t *testing.T) {
	base := run(t, 0, nil)
	for _, c := range []struct {
		name     string
		segments int
		policy   transform.Policy
	}{
		{"sequential-sqrt", -1, transform.Regions{}},
		{"sequential-2", 2, transform.Regions{}},
		{"selective", 0, transform.CheapOps},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := run(t, c.segments, c.policy)
			if got.loss != base.loss {
				t.Fatalf("loss %v, without recomputation %v", got.loss, base.loss)
			}
			for name, g := range base.grads {
				for i := range g {
					if got.grads[name][i] != g[i] {
						t.Fatalf("%s[%d]: %v, without recomputation %v", name, i, got.grads[name][i], g[i])
					}
				}
			}
			if got.copies == 0 || got.peak >= base.peak {
				t.Fatalf("%d recomputed nodes, activation peak %d vs %d without", got.copies, got.peak, base.peak)
			}
			t.Logf("activation peak %d -> %d bytes (%.0f%% lower), %d recomputed nodes", base.peak, got.peak, 100*(1-float64(got.peak)/float64(base.peak)), got.copies)
		})
	}
}
