// Package backend is the seam between the executor and the code that runs
// kernels. A device carries a Backend (device.Device.Backend); package exec
// asks it for the kernel and the workspace size of each node and never
// imports an implementation. The cpu backend (package cpu) is the one the
// cpu and meta devices carry; package backend/ref is a float64 reference
// backend that tests use as an oracle for it; a CUDA backend would be a
// third implementation, wired into device.New("cuda") (docs/architecture.md).
//
// The package sits below exec and cpu in the import graph (it imports only
// trace and tensor), so that device, exec and every backend can name it
// without cycles.
package backend

import (
	"errors"
	"fmt"

	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// Kernel runs one node: in and out are views of the node's buffers (for
// ops with an effect, in[0] is the state written); ws is its workspace,
// Workspace(n) bytes long.
type Kernel func(n *trace.Node, in, out []*tensor.Tensor, ws []byte) error

// Backend runs the kernels of a device.
type Backend interface {
	// Name names the backend in messages ("cpu", "ref").
	Name() string
	// Kernel returns the kernel for ops like o, or an *UnsupportedError.
	Kernel(o trace.Op) (Kernel, error)
	// Workspace is the scratch bytes node n's kernel needs (0 for none).
	// The plan reserves it in the arena, so it must depend only on the
	// node, never on data.
	Workspace(n *trace.Node) int64
}

// Threaded is implemented by backends whose kernels split their work over
// host threads. WithThreads returns a backend with the same kernels whose
// loops run on a pool of n threads of its own (n < 1: the default count),
// so that programs run through it get their n threads even while programs
// of other backends run; the returned backend implements io.Closer to stop
// its threads (they stop too once it is unreachable).
type Threaded interface {
	WithThreads(n int) Backend
}

// Coster is implemented by backends whose kernels, for some ops, do other
// arithmetic than the op declares (prim's Cost counts the textbook
// algorithm): the cpu runs large 3×3 convolutions as Winograd products.
// The budget planner's cost model asks the backend of the device it plans
// on (budget.CostModel.On), so the choice of algorithm stays a fact of the
// backend alone.
type Coster interface {
	// Flops is the arithmetic (a multiply-add counts 2) the kernel for op
	// o does on inputs in producing out; false where the op's declaration
	// holds. It must depend on metadata only, as Workspace does.
	Flops(o trace.Op, in, out []trace.Meta) (float64, bool)
}

// LowCoster is implemented by Costers whose native bfloat16 kernels run
// some products only and widen the others' operands to run their float32
// kernels: the cpu multiplies bf16 matrices natively (AVX512-BF16) but
// runs most bf16 convolutions as float32 Winograd or direct kernels, the
// faster there. The planner's cost model charges a product at the CPU's
// bf16 rate only where NativeLow says it runs natively, and else at the
// float32 rate with the float32 kernel's arithmetic (Flops of the
// operands retyped to float32).
type LowCoster interface {
	// NativeLow reports whether the kernel for op o (a fused node: its
	// producer), its floating-point operands in and out bfloat16,
	// multiplies natively in bfloat16. It must depend on metadata only.
	NativeLow(o trace.Op, in, out []trace.Meta) bool
}

// LowRunner is implemented by backends that can say, for this machine,
// whether the kernel for op o with bfloat16 operands in (out its outputs)
// multiplies natively in bf16: LowCoster's answer where the machine has
// native bf16 products, else false. transform.ReadLow hands an op 16-bit
// operands it would otherwise read as float32 copies only where it does
// (elsewhere the kernel would widen them again, a pass for nothing).
type LowRunner interface {
	RunsLow(o trace.Op, in, out []trace.Meta) bool
}

// NonFinite finds the first NaN or infinity of a tensor.
type NonFinite func(t *tensor.Tensor) (index int, value float64, bad bool)

// FusedChecker is implemented by backends that can run a fused node as the
// ops it replaced and check each value as it is made, so that a diagnosis
// run (exec.Options.CheckFinite) names the op that made a non-finite value
// rather than the fused node. It returns a node standing for that op (nil
// when every value is finite) with the output's index and bad's findings.
type FusedChecker interface {
	RunFusedChecked(n *trace.Node, in, out []*tensor.Tensor, ws []byte, bad NonFinite) (culprit *trace.Node, output, index int, value float64, err error)
}

// ErrUnsupported is matched by errors.Is for every *UnsupportedError.
var ErrUnsupported = errors.New("op not supported by the backend")

// UnsupportedError says that a backend has no kernel for an op (or for an
// op with these attributes or dtypes).
type UnsupportedError struct {
	Backend string // the backend's Name
	Op      string // the op's Name
	Type    string // the op's Go type, for ops that share a name
	Reason  string // what is missing, when more precise than the op
}

func (e *UnsupportedError) Error() string {
	s := fmt.Sprintf("backend %s has no kernel for op %s (%s)", e.Backend, e.Op, e.Type)
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

// Is makes errors.Is(err, ErrUnsupported) true.
func (e *UnsupportedError) Is(target error) bool { return target == ErrUnsupported }

// Unsupported returns the *UnsupportedError of backend b for op o.
func Unsupported(b string, o trace.Op, reason string) *UnsupportedError {
	return &UnsupportedError{Backend: b, Op: o.Name(), Type: fmt.Sprintf("%T", o), Reason: reason}
}
