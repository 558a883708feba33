package gemm

import "fmt"

// KernelSummary says which kernels run on this machine, for reports:
// the sgemm micro-kernel and its tile, the direct-convolution kernels, and
// how bfloat16 products are computed.
func KernelSummary() string {
	conv := "none (implicit GEMM only)"
	if convTile != nil {
		conv = convKernelName
	}
	return fmt.Sprintf("sgemm %s (%dx%d tile), direct convolution %s, bf16/fp16 products %s",
		sgemmKern.name, sgemmKern.mr*max(1, sgemmKern.wideQ), sgemmKern.nr*max(1, sgemmKern.wideP), conv, halfKernelName())
}

// convKernelName names the direct-convolution kernels chosen at init.
var convKernelName = "none"

// halfKernelName says how 16-bit operands are multiplied: widened to
// float32 while packed, then the float32 micro-kernel (float32 arithmetic
// and accumulation, as PyTorch's autocast; no native bf16 instructions).
func halfKernelName() string {
	return "widened to float32 in packing, " + sgemmKern.name + " FMAs"
}

// Capabilities are the kernel families this build chose on this CPU, for
// cost models.
type Capabilities struct {
	AVX512 bool // the AVX-512 sgemm kernel runs
	// NativeBF16 is true where bf16 products run on native bf16
	// instructions (VDPBF16PS) rather than widened to float32. No kernel
	// does yet: see KernelSummary.
	NativeBF16 bool
}

// Caps reports the kernels chosen.
func Caps() Capabilities {
	return Capabilities{AVX512: sgemmKern.name == "avx512"}
}
