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
		sgemmKern.name, sgemmKern.mr, sgemmKern.nr, conv, halfKernelName())
}

// convKernelName names the direct-convolution kernels chosen at init.
var convKernelName = "none"

// halfKernelName says how 16-bit operands are multiplied: widened to
// float32 while packed, then the float32 micro-kernel (float32 arithmetic
// and accumulation, as PyTorch's autocast; no native bf16 instructions).
func halfKernelName() string {
	return "widened to float32 in packing, " + sgemmKern.name + " FMAs"
}
