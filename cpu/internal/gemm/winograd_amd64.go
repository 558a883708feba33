//go:build amd64 && !purego

package gemm

//go:noescape
func winoBT6(n16 int, p *float32, rs, ps int)

//go:noescape
func winoAT6(n16 int, p *float32, rs, ps int)

//go:noescape
func winoGather(n int, row *float32, iw0, w int, dst *float32, rs int)

func init() {
	if hasAVX2FMA() {
		winoIn, winoOut, winoGath = winoBT6, winoAT6, winoGather
	}
}
