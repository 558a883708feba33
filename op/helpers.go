package op

import (
	"fmt"
	"sort"

	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// The functional API's own emitters and argument checks; the node types'
// checks of the same facts are in package prim.

func binary(k prim.BinaryKind, a, b *trace.Tensor) *trace.Tensor {
	return prim.Apply1(&prim.Binary{Kind: k}, a, b)
}

func unary(k prim.UnaryKind, c float64, x *trace.Tensor) *trace.Tensor {
	return prim.Apply1(&prim.Unary{Kind: k, C: c}, x)
}

func reduce(k prim.ReduceKind, x *trace.Tensor, keepDim bool, axes []int) *trace.Tensor {
	r := &prim.Reduce{Kind: k, KeepDim: keepDim}
	r.Axes = normAxes(x, r.Name(), axes)
	return prim.Apply1(r, x)
}

func normAxes(x *trace.Tensor, name string, axes []int) []int {
	seen := map[int]bool{}
	out := []int{}
	for _, a := range axes {
		b, err := x.Shape().Axis(a)
		if err != nil {
			x.Graph().Errorf(name, []*trace.Tensor{x}, "%v", err)
		}
		if !seen[b] {
			seen[b] = true
			out = append(out, b)
		}
	}
	sort.Ints(out)
	return out
}

func sliceAxisArg(x *trace.Tensor, name string, axis int) int {
	a, err := x.Shape().Axis(axis)
	if err != nil || len(x.Shape()) == 0 {
		if err == nil {
			err = fmt.Errorf("cannot slice a scalar")
		}
		x.Graph().Errorf(name, []*trace.Tensor{x}, "%v", err)
	}
	return a
}

func normChannels(s tensor.Shape) (n, c, spatial int) {
	spatial = 1
	for _, d := range s[2:] {
		spatial *= d
	}
	return s[0], s[1], spatial
}

func normCheckGroups(x trace.Meta, groups int) error {
	if len(x.Shape) < 2 {
		return fmt.Errorf("expected input of at least 2 dimensions [N, C, *], got %d-D", len(x.Shape))
	}
	if groups < 1 || x.Shape[1]%groups != 0 {
		return fmt.Errorf("expected the number of channels (%d) to be divisible by num_groups (%d)", x.Shape[1], groups)
	}
	return nil
}
