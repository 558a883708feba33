package op

import (
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// Reshape returns x with a new shape; one dimension may be -1 (inferred).
func Reshape(x *trace.Tensor, shape tensor.Shape) *trace.Tensor { return prim.Reshape(x, shape) }

// Flatten merges axes start..end (inclusive, negative from the end).
func Flatten(x *trace.Tensor, start, end int) *trace.Tensor {
	s := x.Shape()
	a := normAxes(x, "flatten", []int{start})[0]
	b := normAxes(x, "flatten", []int{end})[0]
	out := append(tensor.Shape{}, s[:a]...)
	out = append(out, s[a:b+1].NumElements())
	out = append(out, s[b+1:]...)
	return prim.Reshape(x, out)
}

// PermuteAxes is torch.permute.
func PermuteAxes(x *trace.Tensor, perm ...int) *trace.Tensor { return prim.PermuteAxes(x, perm...) }

// Transpose swaps axes a and b (torch.transpose).
func Transpose(x *trace.Tensor, a, b int) *trace.Tensor {
	ax := normAxes(x, "transpose", []int{a})[0]
	bx := normAxes(x, "transpose", []int{b})[0]
	perm := make([]int, len(x.Shape()))
	for i := range perm {
		perm[i] = i
	}
	perm[ax], perm[bx] = perm[bx], perm[ax]
	return prim.PermuteAxes(x, perm...)
}

// Full returns a tensor of shape filled with v, in graph g.
func Full(g *trace.Graph, dt tensor.DType, shape tensor.Shape, v float64) *trace.Tensor {
	return prim.Full(g, dt, shape, v)
}

// FullLike returns a tensor like x filled with v.
func FullLike(x *trace.Tensor, v float64) *trace.Tensor { return prim.FullLike(x, v) }

// To converts x to dtype dt (x itself if it already is).
func To(x *trace.Tensor, dt tensor.DType) *trace.Tensor { return prim.To(x, dt) }
