package trace_test

import (
	"errors"
	"testing"

	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

func TestModulePathsAndLabels(t *testing.T) {
	g := trace.New()
	var y *trace.Tensor
	err := trace.Capture(func() {
		x := g.Input("x", tensor.Float32, tensor.Shape{2})
		g.WithModule("encoder", func() {
			g.WithModule("0", func() { y = op.ReLU(x) })
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := y.Node.Label(); got != "encoder.0/relu" {
		t.Fatalf("label %q", got)
	}
	if g.Module() != "" {
		t.Fatalf("scope leaked: %q", g.Module())
	}
}

func TestCaptureOnlyCatchesShapeErrors(t *testing.T) {
	err := trace.Capture(func() {
		g := trace.New()
		a := g.Input("a", tensor.Float32, tensor.Shape{2, 3})
		b := g.Input("b", tensor.Float32, tensor.Shape{4})
		op.Add(a, b)
	})
	var se *trace.ShapeError
	if !errors.As(err, &se) || !errors.Is(err, trace.ErrShape) || se.Op != "add" {
		t.Fatalf("want a shape error from add, got %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a non-shape panic was swallowed")
		}
	}()
	_ = trace.Capture(func() { panic("bug") })
}

func TestStateRedeclarationMustAgree(t *testing.T) {
	g := trace.New()
	err := trace.Capture(func() {
		g.State("w", "parameter", tensor.Float32, tensor.Shape{2})
		g.State("w", "parameter", tensor.Float32, tensor.Shape{3})
	})
	if err == nil {
		t.Fatal("conflicting state declarations accepted")
	}
}

// A shape too large for any tensor is a *ShapeError wherever it arises (an
// input, a parameter, an op's output), not a wrapped count in a later
// message.
func TestImpossibleSizes(t *testing.T) {
	for name, f := range map[string]func(g *trace.Graph){
		"input":    func(g *trace.Graph) { g.Input("x", tensor.Float32, tensor.Shape{1 << 60, 1, 28, 28}) },
		"negative": func(g *trace.Graph) { g.Input("x", tensor.Float32, tensor.Shape{-2, 3}) },
		"state":    func(g *trace.Graph) { g.State("w", "parameter", tensor.Float32, tensor.Shape{1 << 40, 1 << 20}) },
		"op output": func(g *trace.Graph) {
			a := g.Input("a", tensor.Float32, tensor.Shape{1 << 25, 1})
			b := g.Input("b", tensor.Float32, tensor.Shape{1, 1 << 25})
			op.MatMulT(a, b, false, false) // 2^50 elements
		},
	} {
		err := trace.Capture(func() { f(trace.New()) })
		if !errors.Is(err, trace.ErrShape) || !errors.Is(err, tensor.ErrSize) {
			t.Errorf("%s: %v, want a shape error for an impossible size", name, err)
		}
	}
}
