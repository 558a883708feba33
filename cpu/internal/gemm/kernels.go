package gemm

import (
	"fmt"
	"strings"

	"github.com/headroom-ml/headroom/internal/cpuid"
)

// KernelSummary says which kernels run on this machine, for reports:
// the sgemm micro-kernel and its tile, the direct-convolution kernels, and
// how bfloat16 products are computed.
func KernelSummary() string {
	conv := "none (implicit GEMM only)"
	if convTile != nil {
		conv = convKernelName
	}
	return fmt.Sprintf("sgemm %s (%dx%d tile), direct convolution %s, %s",
		sgemmKern.name, sgemmKern.mr*max(1, sgemmKern.wideQ), sgemmKern.nr*max(1, sgemmKern.wideP), conv, halfKernelName())
}

// convKernelName names the direct-convolution kernels chosen at init.
var convKernelName = "none"

// halfKernelName says how 16-bit operands are multiplied: bf16 by bf16 on
// the native kernel where one runs (VDPBF16PS, float32 accumulation), and
// otherwise (and always for float16) widened to float32 while packed, then
// the float32 micro-kernel (float32 arithmetic and accumulation, as
// PyTorch's autocast).
func halfKernelName() string {
	widened := "widened to float32 in packing, " + sgemmKern.name + " FMAs"
	if bf16Kern != nil && bf16Kern.amx {
		return fmt.Sprintf("bf16 products AMX-BF16 TDPBF16PS (%dx%d tile, float32 accumulation; convolution and attention tiles VDPBF16PS), fp16 products %s", bf16Kern.mr, bf16Kern.nr, widened)
	}
	if bf16Kern != nil {
		s := fmt.Sprintf("bf16 products VDPBF16PS (%s tile, float32 accumulation), fp16 products %s", strings.TrimPrefix(bf16Kern.name, "avx512_bf16 "), widened)
		if d := cpuid.Detected; d.AMXTile && d.AMXBF16 {
			// The CPU has AMX but it does not run: say why.
			_, why := AMXStatus()
			s += " (" + why + ")"
		}
		return s
	}
	if len(bf16Kernels()) > 0 {
		widened += " (native bf16 off: HEADROOM_BF16_NATIVE=0)"
	}
	return "bf16/fp16 products " + widened
}

// Capabilities are the kernel families this build chose on this CPU, for
// cost models.
type Capabilities struct {
	AVX512 bool // the AVX-512 sgemm kernel runs
	// NativeBF16 is true where bf16 products run on native bf16
	// instructions (VDPBF16PS) rather than widened to float32: about twice
	// float32's products per instruction.
	NativeBF16 bool
	// AMX is true where bf16 products run on the AMX-BF16 kernel
	// (TDPBF16PS tiles): up to 16 times VDPBF16PS's work an instruction.
	// AMXReason says why it runs or not (no AMX, the OS's permission
	// refused, the self-check's outcome), for reports.
	AMX       bool
	AMXReason string
}

// Caps reports the kernels chosen.
func Caps() Capabilities {
	_, why := AMXStatus()
	return Capabilities{AVX512: sgemmKern.name == "avx512", NativeBF16: bf16Kern != nil, AMX: bf16Kern != nil && bf16Kern.amx, AMXReason: why}
}
