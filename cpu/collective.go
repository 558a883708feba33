package cpu

import (
	"context"
	"fmt"
	"reflect"

	"github.com/headroom-ml/headroom/backend"
	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// The collectives inside the graph (prim/collective.go) run on the
// communicator the executor binds for the run (exec.Options.Comm), through
// backend.Collectives; the plain kernel each also registers only says so,
// for a node run some other way (cpu.Run).

var collectives = map[reflect.Type]backend.CollectiveKernel{}

// chunkValues bounds the staging workspace of the flat (ZeRO) gathers and
// scatters: they move a shard in pieces of at most this many values per
// rank, so the workspace is Ranks*min(shard, chunkValues) values.
const chunkValues = 1 << 12

func init() {
	registerCollective[*prim.AllReduce](allReduce)
	registerCollective[*prim.AllGather](allGather)
	registerCollective[*prim.ReduceScatter](reduceScatter)
	RegisterWorkspace[*prim.AllGather](func(n *trace.Node) int64 {
		o := n.Op.(*prim.AllGather)
		if o.Shape == nil || exact(o.Shape.NumElements(), n.Inputs[0].Shape().NumElements(), o.Ranks, n.Inputs[0].Meta.DType) {
			return 0
		}
		return flatWorkspace(n.Inputs[0].Shape().NumElements(), o.Ranks, n.Inputs[0].Meta.DType)
	})
	RegisterWorkspace[*prim.ReduceScatter](func(n *trace.Node) int64 {
		o := n.Op.(*prim.ReduceScatter)
		if !o.Flat && n.Inputs[0].Meta.DType != tensor.Float64 ||
			o.Flat && exact(n.Inputs[0].Shape().NumElements(), n.Outputs[0].Shape().NumElements(), o.Ranks, n.Inputs[0].Meta.DType) {
			return 0
		}
		return flatWorkspace(n.Outputs[0].Shape().NumElements(), o.Ranks, n.Inputs[0].Meta.DType)
	})
}

// flatWorkspace is the staging of a flat gather or scatter of shards of c
// values: a piece per rank; float64 reduces the whole padded tensor at
// once (the communicator has no float64 gather), so it stages all of it.
func flatWorkspace(c, ranks int, dt tensor.DType) int64 {
	if dt == tensor.Float64 {
		return int64(c*ranks) * 8
	}
	return int64(min(c, chunkValues)*ranks) * 4
}

// exact reports whether a float32 tensor of n values is its shards of c
// values without padding: then it is gathered into, or scattered from,
// directly.
func exact(n, c, ranks int, dt tensor.DType) bool { return dt == tensor.Float32 && n == c*ranks }

func registerCollective[O trace.Op](k backend.CollectiveKernel) {
	var o O
	collectives[reflect.TypeOf(o)] = k
	Register[O](func(_ *parallel.Pool, n *trace.Node, _, _ []*tensor.Tensor, _ []byte) error {
		return fmt.Errorf("cpu: %s communicates: run it through exec with a communicator (exec.Options.Comm)", n.Op.Name())
	})
}

// CollectiveKernel implements backend.Collectives.
func (*cpuBackend) CollectiveKernel(o trace.Op) (backend.CollectiveKernel, error) {
	k, ok := collectives[reflect.TypeOf(o)]
	if !ok {
		return nil, backend.Unsupported("cpu", o, "no collective kernel")
	}
	return k, nil
}

func allReduce(ctx context.Context, c comm.Comm, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	switch in[0].DType {
	case tensor.Float32:
		v := out[0].F32()
		copy(v, in[0].F32())
		return c.AllReduce(ctx, v, comm.Sum)
	case tensor.Float64:
		v := out[0].F64()
		copy(v, in[0].F64())
		return c.AllReduce64(ctx, v, comm.Sum)
	}
	return fmt.Errorf("cpu: all-reduce of %v", in[0].DType)
}

func allGather(ctx context.Context, c comm.Comm, n *trace.Node, in, out []*tensor.Tensor, ws []byte) error {
	o := n.Op.(*prim.AllGather)
	size, rank := c.Size(), c.Rank()
	switch in[0].DType {
	case tensor.Float32:
		send, recv := in[0].F32(), out[0].F32()
		if o.Shape == nil || len(recv) == size*len(send) {
			return c.AllGather(ctx, send, recv)
		}
		// A flat shard: gather in pieces through the workspace, dropping
		// the padding.
		cl := len(send)
		buf := wsF32(ws)
		for k := 0; k < cl; k += chunkValues {
			m := min(chunkValues, cl-k)
			b := buf[:m*size]
			if err := c.AllGather(ctx, send[k:k+m], b); err != nil {
				return err
			}
			for r := range size {
				copy(part(recv, r*cl+k, m), b[r*m:(r+1)*m])
			}
		}
		return nil
	case tensor.Float64:
		// Each rank's block in zeros, summed: exact.
		send, recv := in[0].F64(), out[0].F64()
		full := recv
		if o.Shape != nil {
			full = wsF64(ws)[:len(send)*size]
		}
		clear(full)
		copy(full[rank*len(send):], send)
		if err := c.AllReduce64(ctx, full, comm.Sum); err != nil {
			return err
		}
		copy(recv, full)
		return nil
	}
	return fmt.Errorf("cpu: all-gather of %v", in[0].DType)
}

func reduceScatter(ctx context.Context, c comm.Comm, n *trace.Node, in, out []*tensor.Tensor, ws []byte) error {
	o := n.Op.(*prim.ReduceScatter)
	size, rank := c.Size(), c.Rank()
	switch in[0].DType {
	case tensor.Float32:
		send, recv := in[0].F32(), out[0].F32()
		if !o.Flat || len(send) == size*len(recv) {
			return c.ReduceScatter(ctx, send, recv, comm.Sum)
		}
		cl := len(recv)
		buf := wsF32(ws)
		for k := 0; k < cl; k += chunkValues {
			m := min(chunkValues, cl-k)
			b := buf[:m*size]
			for r := range size {
				dst := b[r*m : (r+1)*m]
				clear(dst[copy(dst, part(send, r*cl+k, m)):])
			}
			if err := c.ReduceScatter(ctx, b, recv[k:k+m], comm.Sum); err != nil {
				return err
			}
		}
		return nil
	case tensor.Float64:
		send, recv := in[0].F64(), out[0].F64()
		m := len(recv)
		full := wsF64(ws)[:m*size]
		clear(full[copy(full, send):])
		if err := c.AllReduce64(ctx, full, comm.Sum); err != nil {
			return err
		}
		copy(recv, full[rank*m:(rank+1)*m])
		return nil
	}
	return fmt.Errorf("cpu: reduce-scatter of %v", in[0].DType)
}

// part is values [lo, lo+m) of v, as far as v has them.
func part[T any](v []T, lo, m int) []T {
	lo = min(lo, len(v))
	return v[lo:min(lo+m, len(v))]
}

func wsF32(ws []byte) []float32 {
	return (&tensor.Tensor{DType: tensor.Float32, Shape: tensor.Shape{len(ws) / 4}, Data: ws[:len(ws)/4*4]}).F32()
}

func wsF64(ws []byte) []float64 {
	return (&tensor.Tensor{DType: tensor.Float64, Shape: tensor.Shape{len(ws) / 8}, Data: ws[:len(ws)/8*8]}).F64()
}
