//go:build amd64 && !purego

package gemm

import "github.com/headroom-ml/headroom/internal/cpuid"

//go:noescape
func winoBT6(n16 int, p *float32, rs, ps int)

//go:noescape
func winoAT6(n16 int, p *float32, rs, ps int)

//go:noescape
func winoGather(n int, row *float32, iw0, w int, dst *float32, rs int)

//go:noescape
func winoScatter(n int, m *float32, rs int, b float32, y *float32, ldy, rows, cols int)

//go:noescape
func winoG6(n16 int, p *float32, rs, ps int)

//go:noescape
func winoGT6(n16 int, p *float32, rs, ps int)

//go:noescape
func winoGatherRows512(n int, plane *float32, ih0, h, w, iw0 int, dst *float32, rs, nrows int)

//go:noescape
func winoGatherRowsBF16512(n int, plane *uint16, ih0, h, w, iw0 int, dst *float32, rs, nrows int)

//go:noescape
func winoA6(n16 int, p *float32, rs, ps int)

//go:noescape
func winoWGather(n8 int, wt *float32, idx *int32, dst *float32, rs int, flip int)

func init() {
	if hasAVX2FMA() {
		winoIn, winoOut, winoWeight = winoBT6, winoAT6, winoG6
		winoGath, winoScat = winoGather, winoScatter
		winoWGath, winoWOut = winoWGather, winoGT6
		winoGradA = winoA6
	}
	// With the AVX-512 kernel set (not when HEADROOM_SGEMM_KERNEL forces
	// AVX2): masked loads and stores on opmasks, and one call a run.
	if hasAVX512() && sgemmKern == kernAVX512 {
		winoGathRows = winoGatherRows512
		if cpuid.X86.AVX512BW {
			winoGathRowsB = winoGatherRowsBF16512
		}
	}
}
