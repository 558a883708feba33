//go:build amd64 && !purego

package gemm

import (
	"fmt"

	"github.com/headroom-ml/headroom/internal/cpuid"
)

//go:generate go run gen_amx.go

// amxKernel32x32 is in amx_amd64.s (gen_amx.go): the 32×32 tile at c from
// steps 16-pair steps of A rows rs bytes apart at a and the pair-major B
// panel at b, then, where tail is not nil, one step from tail (A rows 64
// bytes apart, B 2048 bytes in), the sums through sums (32×32) to c.
//
//go:noescape
func amxKernel32x32(cfg *byte, steps int, a *uint32, rs int, b *uint32, tail *uint32, sums *float32, c *float32, ldc int, alpha, beta float32, beta0 int)

// amxStrided is the assembly kernel with the AMX contract (amxTileGo):
// A rows rs dwords apart.
func amxStrided(kp int, a []uint32, rs int, b []uint32, c []float32, ldc int, alpha, beta float32, beta0 bool) {
	amxRun(amxKernel32x32, kp, a, rs, b, c, ldc, alpha, beta, beta0)
}

// amxProbe decides whether the AMX kernel runs: the CPU has AMX-TILE and
// AMX-BF16 (after $HEADROOM_MAX_ISA) and AVX-512 (its stores), the OS
// grants the tile state, and the kernel passes amxSelfCheck. Else it
// says why not.
func amxProbe() (*bf16Kernel, amxModel, string) {
	f := cpuid.X86
	switch {
	case !f.AMXTile || !f.AMXBF16:
		if d := cpuid.Detected; d.AMXTile && d.AMXBF16 {
			return nil, 0, "AMX off by HEADROOM_MAX_ISA=" + cpuid.MaxISA
		}
		return nil, 0, "the CPU (or OS) has no AMX-BF16"
	case !hasAVX512BF16():
		return nil, 0, "AMX off: the kernel's stores need AVX-512"
	}
	if err := cpuid.RequestAMX(); err != nil {
		return nil, 0, "AMX off: " + err.Error()
	}
	var (
		model  amxModel
		report string
		ok     bool
	)
	if err := catchFault(func() { model, report, ok = amxSelfCheck(amxStrided) }); err != nil {
		// A bad address in the kernel turns AMX off, not the process; an
		// illegal instruction, which the checks above rule out, could not
		// be caught.
		return nil, 0, "AMX off: self-check failed: " + err.Error()
	}
	if !ok {
		return nil, 0, "AMX off: self-check failed: " + report
	}
	return amxKernelOf(fmt.Sprintf("amx_bf16 %dx%d", amxMR, amxNR), amxStrided), model, "AMX on: self-check " + report
}

// amxPackTr is in amx_amd64.s (gen_amx.go): whole 16×16 blocks of
// packRowsTr, rows ds dwords apart (AVX-512F).
//
//go:noescape
func amxPackTr(src *uint16, ld, qblocks, iblocks int, dst *uint32, ds int)

func init() {
	if hasAVX512() {
		amxPackTrAsm = amxPackTr
	}
}
