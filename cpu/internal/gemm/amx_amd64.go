//go:build amd64 && !purego

package gemm

import (
	"fmt"
	"sync"

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

// amxCfg is the tile configuration LDTILECFG loads: palette 1, tiles 0-7
// each 16 rows of 64 bytes (C: 16×16 float32; A: 16 rows × 16 pairs; B:
// 16 pairs × 16 columns).
var amxCfg = func() (cfg [64]byte) {
	cfg[0] = 1
	for t := range 8 {
		cfg[16+2*t] = 64 // colsb, little endian
		cfg[48+t] = 16   // rows
	}
	return cfg
}()

// amxScratch is the kernel's scratch: the tail step's A (32 rows of 16
// pairs) and, right after it (2048 bytes in, as the kernel expects), B (16
// pairs of 32 columns), both zero past the tail; and the sums.
type amxScratch struct {
	a    [amxMR * amxStep]uint32
	b    [amxStep * amxNR]uint32
	sums [amxMR * amxNR]float32
}

var amxScratches sync.Pool

// amxStrided is the assembly kernel with the AMX contract (amxTileGo):
// A rows rs dwords apart, after checking the bounds it reads.
func amxStrided(kp int, a []uint32, rs int, b []uint32, c []float32, ldc int, alpha, beta float32, beta0 bool) {
	steps := kp / amxStep
	if steps > 0 {
		_ = a[(amxMR-1)*rs+steps*amxStep-1]
	}
	_ = b[amxNR*kp-1]
	_ = c[(amxMR-1)*ldc+amxNR-1]
	s, _ := amxScratches.Get().(*amxScratch)
	if s == nil {
		s = new(amxScratch)
	}
	defer amxScratches.Put(s)
	var tail *uint32
	if q0 := steps * amxStep; q0 < kp {
		// The last pairs into zeroed scratch: TILELOADD reads whole
		// 64-byte rows, and what lies past kp (the next K block, another
		// row, garbage) must not enter the sums (0·NaN).
		r := kp - q0
		for i := range amxMR {
			row := s.a[i*amxStep : (i+1)*amxStep]
			copy(row, a[i*rs+q0:i*rs+kp])
			clear(row[r:])
		}
		copy(s.b[:], b[q0*amxNR:kp*amxNR])
		clear(s.b[r*amxNR:])
		tail = &s.a[0]
	}
	z := 0
	if beta0 {
		z = 1
	}
	amxKernel32x32(&amxCfg[0], steps, &a[0], 4*rs, &b[0], tail, &s.sums[0], &c[0], ldc, alpha, beta, z)
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
	model, report, ok := amxSelfCheck(amxStrided)
	if !ok {
		return nil, 0, "AMX off: self-check failed: " + report
	}
	return amxKernelOf(fmt.Sprintf("amx_bf16 %dx%d", amxMR, amxNR), amxStrided), model, "AMX on: self-check " + report
}
