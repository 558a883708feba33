package op

import (
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/trace"
)

// Slice is x[..., start:end:step, ...] along axis (a copy), with Python's
// rules: negative start and end count from the end and both are clamped to
// the axis; step must be positive.
func Slice(x *trace.Tensor, axis, start, end, step int) *trace.Tensor {
	a := sliceAxisArg(x, "slice", axis)
	if step < 1 {
		x.Graph().Errorf("slice", []*trace.Tensor{x}, "slice step must be positive, got %d", step)
	}
	d := x.Shape()[a]
	clamp := func(i int) int {
		if i < 0 {
			i += d
		}
		return min(max(i, 0), d)
	}
	s, e := clamp(start), clamp(end)
	e = max(e, s)
	if s == 0 && e == d && step == 1 {
		return x
	}
	return prim.Apply1(&prim.SliceOp{Axis: a, Start: s, End: e, Step: step}, x)
}

// Narrow is torch.narrow: length elements of axis from start (negative start
// counts from the end). Unlike Slice, a range past the end is an error.
func Narrow(x *trace.Tensor, axis, start, length int) *trace.Tensor {
	a := sliceAxisArg(x, "narrow", axis)
	d := x.Shape()[a]
	if start < 0 {
		start += d
	}
	if start < 0 || start > d {
		x.Graph().Errorf("narrow", []*trace.Tensor{x}, "start %d out of range for axis %d of size %d", start, a, d)
	}
	if length < 0 || start+length > d {
		x.Graph().Errorf("narrow", []*trace.Tensor{x}, "start (%d) + length (%d) exceeds dimension size (%d)", start, length, d)
	}
	return Slice(x, a, start, start+length, 1)
}

// Cat is torch.cat(xs, dim=axis): the tensors must agree on every axis but
// axis. Its backward splits the gradient in one pass.
func Cat(axis int, xs ...*trace.Tensor) *trace.Tensor { return prim.Cat(axis, xs...) }

// SplitSizes is torch.split(x, sizes, dim=axis) with a list of sizes, which
// must sum to the size of axis.
func SplitSizes(x *trace.Tensor, axis int, sizes ...int) []*trace.Tensor {
	a := sliceAxisArg(x, "split", axis)
	if len(sizes) == 1 && sizes[0] == x.Shape()[a] {
		return []*trace.Tensor{x}
	}
	return x.Graph().Apply(&prim.SplitOp{Axis: a, Sizes: append([]int(nil), sizes...)}, x)
}

// Split is torch.split(x, size, dim=axis): pieces of size elements along
// axis, the last one smaller when size does not divide the axis.
func Split(x *trace.Tensor, axis, size int) []*trace.Tensor {
	a := sliceAxisArg(x, "split", axis)
	d := x.Shape()[a]
	if size < 1 {
		x.Graph().Errorf("split", []*trace.Tensor{x}, "split size must be positive, got %d", size)
	}
	var sizes []int
	for s := 0; s < d; s += size {
		sizes = append(sizes, min(size, d-s))
	}
	if len(sizes) == 0 {
		sizes = []int{0}
	}
	return SplitSizes(x, a, sizes...)
}

// Chunk is torch.chunk(x, chunks, dim=axis): pieces of ceil(size/chunks)
// elements, so there may be fewer than chunks of them.
func Chunk(x *trace.Tensor, axis, chunks int) []*trace.Tensor {
	a := sliceAxisArg(x, "chunk", axis)
	if chunks < 1 {
		x.Graph().Errorf("chunk", []*trace.Tensor{x}, "chunk expects a positive number of chunks, got %d", chunks)
	}
	d := x.Shape()[a]
	if d == 0 {
		return SplitSizes(x, a, make([]int, chunks)...)
	}
	return Split(x, a, (d+chunks-1)/chunks)
}
