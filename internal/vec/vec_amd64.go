//go:build amd64 && !purego

package vec

func cpuid(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)
func xgetbv() (eax, edx uint32)

//go:noescape
func geluAVX2(x, y *float32, n int)

//go:noescape
func geluBackwardAVX2(dy, x, y *float32, n int)

var enabled = hasAVX2FMA()

// hasAVX2FMA reports whether the CPU and OS support AVX2 and FMA3.
func hasAVX2FMA() bool {
	maxLeaf, _, _, _ := cpuid(0, 0)
	if maxLeaf < 7 {
		return false
	}
	_, _, ecx1, _ := cpuid(1, 0)
	const (
		fma     = 1 << 12
		osxsave = 1 << 27
		avx     = 1 << 28
	)
	if ecx1&(fma|osxsave|avx) != fma|osxsave|avx {
		return false
	}
	if xcr0, _ := xgetbv(); xcr0&6 != 6 {
		return false
	}
	_, ebx7, _, _ := cpuid(7, 0)
	const avx2 = 1 << 5
	return ebx7&avx2 != 0
}

//go:noescape
func adamAVX2(v, grad, m, s *float32, n int, c *AdamConsts)

//go:noescape
func expAffineAVX2(x, y *float32, n int, ab *[2]float32)

//go:noescape
func reluAVX2(x, y *float32, n int)

//go:noescape
func reluBackwardAVX2(dy, s, y *float32, n int)

//go:noescape
func leakyAVX2(dy, x, y *float32, n int, c float32)

// sumsAVX2 computes, over n (a multiple of 16) elements: mode 0, out[0] =
// Σx; mode 1, out[0] = Σ(x-m)²; mode 2, out[0] = Σdy and out[1] =
// Σdy*(x-m); all in float64.
//
//go:noescape
func sumsAVX2(dy, x *float32, n int, m float64, out *[2]float64, mode int)

// normAVX2: mode 0, y = x*c[0] + c[1]; mode 1, y = (dy - c[0] - (x-c[1])*c[2]) * c[3].
//
//go:noescape
func normAVX2(dy, x, y *float32, n int, c *[4]float32, mode int)

//go:noescape
func addAVX2(a, b, y *float32, n int)
