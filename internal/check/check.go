// Package check runs small graphs for tests: evaluate a function of host
// tensors, take its gradients, and compare them with central finite
// differences in float64.
package check

import (
	"context"
	"fmt"
	"math"
	"math/rand"

	"github.com/headroom-ml/headroom/autodiff"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/exec"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// Func builds a graph from symbolic inputs and returns one output.
type Func func(xs []*trace.Tensor) *trace.Tensor

func inputName(i int) string { return fmt.Sprintf("x%d", i) }

// Eval runs f on the inputs on the cpu device and returns its output. With
// seed non-nil it also returns the gradient of sum(output*seed) with respect
// to each floating-point input (nil for the others).
func Eval(f Func, inputs []*tensor.Tensor, seed *tensor.Tensor) (out *tensor.Tensor, grads []*tensor.Tensor, err error) {
	g := trace.New()
	feed := map[string]*tensor.Tensor{}
	var xs []*trace.Tensor
	var y *trace.Tensor
	var gs []*trace.Tensor
	err = trace.Capture(func() {
		for i, t := range inputs {
			xs = append(xs, g.Input(inputName(i), t.DType, t.Shape))
			feed[inputName(i)] = t
		}
		y = f(xs)
		g.Output("y", y)
		if seed == nil {
			return
		}
		if !seed.Shape.Equal(y.Shape()) {
			g.Errorf("check", []*trace.Tensor{y}, "seed shape %v differs from output shape", seed.Shape)
		}
		s := g.Input("seed", seed.DType, seed.Shape)
		feed["seed"] = seed
		loss := op.Sum(op.Mul(y, s), false)
		var wrt []*trace.Tensor
		for _, x := range xs {
			if x.DType().IsFloat() {
				wrt = append(wrt, x)
			}
		}
		var berr error
		gs, berr = autodiff.Backward(loss, wrt)
		if berr != nil {
			panic(berr)
		}
		k := 0
		for i, x := range xs {
			if x.DType().IsFloat() {
				if gs[k] == nil {
					gs[k] = op.FullLike(x, 0)
				}
				g.Output(fmt.Sprintf("g%d", i), gs[k])
				k++
			}
		}
	})
	if err != nil {
		return nil, nil, err
	}
	if g.InputNode(op.StepInput) != nil {
		feed[op.StepInput] = tensor.FromInt64(tensor.Shape{1}, []int64{0})
	}
	p, err := exec.Compile(g, device.CPU())
	if err != nil {
		return nil, nil, err
	}
	arena := exec.NewArena(p.Device)
	defer arena.Release()
	res, err := p.Run(context.Background(), arena, exec.StateMap{}, feed, nil)
	if err != nil {
		return nil, nil, err
	}
	out = res["y"]
	if seed != nil {
		grads = make([]*tensor.Tensor, len(inputs))
		for i := range inputs {
			grads[i] = res[fmt.Sprintf("g%d", i)]
		}
	}
	return out, grads, nil
}

// Random returns a float64 tensor of the shape with values uniform in [lo, hi).
func Random(r *rand.Rand, shape tensor.Shape, lo, hi float64) *tensor.Tensor {
	t := tensor.New(tensor.Float64, shape)
	for i := range t.F64() {
		t.F64()[i] = lo + (hi-lo)*r.Float64()
	}
	return t
}

// Report describes the largest disagreement found by Gradients.
type Report struct {
	Input, Index     int
	Analytic, Finite float64
	MaxAbsErr        float64
}

// Gradients compares f's analytic gradients (float64) with central
// differences of sum(f(x)*seed) and returns an error if any element differs
// by more than atol + rtol*|finite|.
func Gradients(f Func, inputs []*tensor.Tensor, eps, atol, rtol float64) (Report, error) {
	r := rand.New(rand.NewSource(1))
	out, _, err := Eval(f, inputs, nil)
	if err != nil {
		return Report{}, err
	}
	seed := Random(r, out.Shape, -1, 1)
	_, grads, err := Eval(f, inputs, seed)
	if err != nil {
		return Report{}, err
	}
	scalar := func() (float64, error) {
		y, _, err := Eval(f, inputs, nil)
		if err != nil {
			return 0, err
		}
		s := 0.0
		for i, v := range y.F64() {
			s += v * seed.F64()[i]
		}
		return s, nil
	}
	var rep Report
	for i, x := range inputs {
		if x.DType != tensor.Float64 {
			continue
		}
		xv := x.F64()
		gv := grads[i].F64()
		for j := range xv {
			orig := xv[j]
			xv[j] = orig + eps
			fp, err := scalar()
			if err != nil {
				return rep, err
			}
			xv[j] = orig - eps
			fm, err := scalar()
			if err != nil {
				return rep, err
			}
			xv[j] = orig
			fd := (fp - fm) / (2 * eps)
			d := math.Abs(fd - gv[j])
			if d > rep.MaxAbsErr {
				rep = Report{Input: i, Index: j, Analytic: gv[j], Finite: fd, MaxAbsErr: d}
			}
			if d > atol+rtol*math.Abs(fd) || math.IsNaN(gv[j]) {
				return rep, fmt.Errorf("input %d element %d: analytic gradient %.10g, finite difference %.10g", i, j, gv[j], fd)
			}
		}
	}
	return rep, nil
}
