// Package cpu is the cpu device's backend: one kernel per op type,
// registered by the op's Go type, generic over float32 and float64 (dtype
// dispatch is written once, in dispatch below).
package cpu

import (
	"fmt"
	"reflect"

	"github.com/headroom-ml/headroom/backend"
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// Kernel runs one node: in and out are views of the node's buffers; ws is
// its workspace (len from the registered WorkspaceFunc, else empty). Its
// loops split over pool, the pool of the backend that runs it (nil: the
// process-wide default pool), so that each backend's kernels get that
// backend's threads.
type Kernel func(pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, ws []byte) error

// WorkspaceFunc reports the scratch bytes a node's kernel needs.
type WorkspaceFunc func(n *trace.Node) int64

var (
	kernels    = map[reflect.Type]Kernel{}
	workspaces = map[reflect.Type]WorkspaceFunc{}
)

// Register installs the kernel for ops of type O (a pointer type).
func Register[O trace.Op](k Kernel) {
	var o O
	kernels[reflect.TypeOf(o)] = k
}

// RegisterWorkspace installs the workspace size function for ops of type O.
func RegisterWorkspace[O trace.Op](f WorkspaceFunc) {
	var o O
	workspaces[reflect.TypeOf(o)] = f
}

// Run executes node n on the default pool.
func Run(n *trace.Node, in, out []*tensor.Tensor, ws []byte) error { return runOn(nil, n, in, out, ws) }

// runOn executes node n with its loops on pool.
func runOn(pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, ws []byte) error {
	k, ok := kernels[reflect.TypeOf(n.Op)]
	if !ok {
		return fmt.Errorf("cpu: no kernel for op %s (%T)", n.Op.Name(), n.Op)
	}
	return k(pool, n, in, out, ws)
}

// Workspace is the scratch bytes node n needs on the cpu device. The meta
// device uses it too, so both plan the same bytes.
func Workspace(n *trace.Node) int64 {
	if n.Kind != trace.KindOp {
		return 0
	}
	if f, ok := workspaces[reflect.TypeOf(n.Op)]; ok {
		return f(n)
	}
	return 0
}

// HasKernel reports whether ops like o can run on the cpu.
func HasKernel(o trace.Op) bool {
	_, ok := kernels[reflect.TypeOf(o)]
	return ok
}

// Backend returns the cpu backend: the kernels registered in this package,
// behind the interface package exec runs them through. The cpu and meta
// devices carry it (device.New), so both plan the same workspaces. Its
// kernels split their loops over the process-wide default pool
// (parallel.SetThreads, $HEADROOM_NUM_THREADS); WithThreads gives a
// backend with threads of its own.
func Backend() backend.Backend { return &cpuBackend{} }

// cpuBackend runs the registered kernels on pool (nil: the default pool).
type cpuBackend struct {
	pool *parallel.Pool
}

func (*cpuBackend) Name() string { return "cpu" }

func (b *cpuBackend) Kernel(o trace.Op) (backend.Kernel, error) {
	k, ok := kernels[reflect.TypeOf(o)]
	if !ok {
		return nil, backend.Unsupported("cpu", o, "")
	}
	pool := b.pool
	return func(n *trace.Node, in, out []*tensor.Tensor, ws []byte) error { return k(pool, n, in, out, ws) }, nil
}

func (*cpuBackend) Workspace(n *trace.Node) int64 { return Workspace(n) }

func (b *cpuBackend) RunFusedChecked(n *trace.Node, in, out []*tensor.Tensor, ws []byte, bad backend.NonFinite) (*trace.Node, int, int, float64, error) {
	return runFusedChecked(b.pool, n, in, out, ws, bad)
}

// WithThreads returns a cpu backend whose kernels split their loops over
// a pool of n threads of its own (n < 1: as many as the default pool), so
// that programs run through it get their threads even while other
// backends' programs run. Close stops its workers (they also stop once
// the backend is unreachable).
func (b *cpuBackend) WithThreads(n int) backend.Backend {
	return &cpuBackend{pool: parallel.NewPool(n)}
}

// For runs a loop on the backend's pool (parallel.Pool.For), for work the
// engine does next to the kernels: an optimizer's update (optim.Adam's
// SetLoops).
func (b *cpuBackend) For(n, grain int, fn func(lo, hi int)) { b.pool.For(n, grain, fn) }

// Threads reports how many threads the backend's loops are split across.
func (b *cpuBackend) Threads() int { return b.pool.Threads() }

// Close stops the workers of a backend made by WithThreads; the backend
// still runs kernels afterwards, each on its caller's goroutine alone.
func (b *cpuBackend) Close() error {
	b.pool.Close()
	return nil
}

// PoolStats reports what the backend's pool has done (for tests and
// reports): loops split across threads, loops run inline because the pool
// was busy, workers started.
func (b *cpuBackend) PoolStats() parallel.Stats { return b.pool.Stats() }

// Float is the set of element types kernels compute in.
type Float interface{ ~float32 | ~float64 }

// slice views t's data as []T.
func slice[T Float](t *tensor.Tensor) []T {
	var z T
	switch any(z).(type) {
	case float32:
		return any(t.F32()).([]T)
	default:
		return any(t.F64()).([]T)
	}
}

// dispatch runs f32 or f64 by dt; other dtypes are an error naming the op.
func dispatch(n *trace.Node, dt tensor.DType, f32 func() error, f64 func() error) error {
	switch dt {
	case tensor.Float32:
		return f32()
	case tensor.Float64:
		return f64()
	}
	return fmt.Errorf("cpu: %s does not support %v yet", n.Label(), dt)
}

// Floats registers a kernel written once, generically, for float32 and float64
// (dispatch on the dtype of the first output, or first input if none).
func Floats[O trace.Op](k32, k64 Kernel) {
	Register[O](func(pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, ws []byte) error {
		dt := tensor.Invalid
		if len(out) > 0 {
			dt = out[0].DType
		} else if len(in) > 0 {
			dt = in[len(in)-1].DType
		}
		return dispatch(n, dt, func() error { return k32(pool, n, in, out, ws) }, func() error { return k64(pool, n, in, out, ws) })
	})
}
