package nn_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

type block struct{ FC *nn.Linear }

func (b *block) Forward(x *trace.Tensor) *trace.Tensor { return op.ReLU(b.FC.Forward(x)) }

type containerNet struct {
	Features *nn.Sequential
	Layers   nn.ModuleList[*block]
}

func (m *containerNet) Forward(x *trace.Tensor) *trace.Tensor {
	x = m.Features.Forward(x)
	for _, l := range m.Layers {
		x = l.Forward(x)
	}
	return x
}

// Containers name parameters as PyTorch's state_dict does:
// nn.Sequential(Linear(4, 8), ReLU(), Linear(8, 6, bias=False)) as
// "features" and nn.ModuleList of two blocks with a Linear "fc" as
// "layers".
func TestContainersStateDictNames(t *testing.T) {
	s := nn.NewStore()
	b := s.Root()
	m := &containerNet{
		Features: nn.NewSequential(b.Sub("features"),
			func(b nn.Builder) nn.Layer { return nn.NewLinear(b, 4, 8, true) },
			nn.Func(op.ReLU),
			func(b nn.Builder) nn.Layer { return nn.NewLinear(b, 8, 6, false) }),
		Layers: nn.NewModuleList(b.Sub("layers"), 2, func(b nn.Builder, i int) *block {
			return &block{FC: nn.NewLinear(b.Sub("fc"), 6, 6, true)}
		}),
	}
	var names []string
	for _, p := range s.Params() {
		names = append(names, p.Name)
	}
	want := []string{"features.0.weight", "features.0.bias", "features.2.weight",
		"layers.0.fc.weight", "layers.0.fc.bias", "layers.1.fc.weight", "layers.1.fc.bias"}
	if !slices.Equal(names, want) {
		t.Fatalf("names %v, want %v", names, want)
	}

	g := trace.New()
	var out *trace.Tensor
	if err := trace.Capture(func() { out = m.Forward(g.Input("x", tensor.Float32, tensor.Shape{3, 4})) }); err != nil {
		t.Fatal(err)
	}
	if !out.Shape().Equal(tensor.Shape{3, 6}) {
		t.Errorf("output shape %v, want [3, 6]", out.Shape())
	}
	// The parameterless ReLU is attributed to its index, as in PyTorch's
	// profiler and memory snapshots.
	var relu []string
	for _, n := range g.Nodes {
		if n.Kind == trace.KindOp && strings.Contains(n.Op.Name(), "relu") {
			relu = append(relu, n.Module)
		}
	}
	if len(relu) == 0 || relu[0] != "features.1" {
		t.Errorf("relu nodes recorded under %v, want features.1 first", relu)
	}
}

// Sequential at the root names its layers "0", "1", ...: the names
// twoLayers spells by hand.
func TestSequentialAtRoot(t *testing.T) {
	s := nn.NewStore()
	nn.NewSequential(s.Root(),
		func(b nn.Builder) nn.Layer { return nn.NewLinear(b, 784, 256, true) },
		nn.Func(op.ReLU),
		func(b nn.Builder) nn.Layer { return nn.NewLinear(b, 256, 10, false) })
	want := twoLayers()
	if got, w := len(s.Params()), len(want.Params()); got != w {
		t.Fatalf("%d params, want %d", got, w)
	}
	for i, p := range s.Params() {
		if q := want.Params()[i]; p.Name != q.Name || !p.Shape.Equal(q.Shape) {
			t.Errorf("param %d: %s %v, want %s %v", i, p.Name, p.Shape, q.Name, q.Shape)
		}
	}
}
