package op

import (
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// MaskedFill is x.masked_fill(mask, value): value where the bool mask is
// true, x elsewhere. The mask has x's shape or a suffix of it (repeated
// over the leading axes).
func MaskedFill(x, mask *trace.Tensor, value float64) *trace.Tensor {
	return prim.Apply1(&prim.MaskedFillOp{Value: value}, x, mask)
}

// Arange is torch.arange(n, dtype=dt) as a constant of graph g: 0, 1, ...,
// n-1.
func Arange(g *trace.Graph, dt tensor.DType, n int) *trace.Tensor {
	v := make([]float64, n)
	for i := range v {
		v[i] = float64(i)
	}
	return g.Const(tensor.FromFloat64(tensor.Shape{n}, v).Convert(dt))
}

// TrilMask is torch.ones(rows, cols, dtype=bool).tril(diagonal) as a
// constant of graph g: true where column j <= row i + diagonal.
func TrilMask(g *trace.Graph, rows, cols, diagonal int) *trace.Tensor {
	return g.Const(triMask(rows, cols, func(i, j int) bool { return j <= i+diagonal }))
}

// TriuMask is torch.ones(rows, cols, dtype=bool).triu(diagonal) as a
// constant of graph g: true where column j >= row i + diagonal.
// TriuMask(g, t, t, 1) is the causal mask: the future positions.
func TriuMask(g *trace.Graph, rows, cols, diagonal int) *trace.Tensor {
	return g.Const(triMask(rows, cols, func(i, j int) bool { return j >= i+diagonal }))
}

func triMask(rows, cols int, on func(i, j int) bool) *tensor.Tensor {
	t := tensor.New(tensor.Bool, tensor.Shape{rows, cols})
	for i := range rows {
		for j := range cols {
			if on(i, j) {
				t.Data[i*cols+j] = 1
			}
		}
	}
	return t
}

// Tril is torch.tril(x, diagonal) over x's last two axes: the elements
// above the diagonal set to 0.
func Tril(x *trace.Tensor, diagonal int) *trace.Tensor {
	s := x.Shape()
	if len(s) < 2 {
		x.Graph().Errorf("tril", []*trace.Tensor{x}, "input must have at least 2 dimensions, got %v", s)
		return nil
	}
	return MaskedFill(x, TriuMask(x.Graph(), s[len(s)-2], s[len(s)-1], diagonal+1), 0)
}
