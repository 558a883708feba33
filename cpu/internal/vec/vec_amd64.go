//go:build amd64 && !purego

package vec

import "github.com/headroom-ml/headroom/internal/cpuid"

//go:noescape
func geluAVX2(x, y *float32, n int)

//go:noescape
func geluBackwardAVX2(dy, x, y *float32, n int)

var enabled = cpuid.X86.AVX2FMA()

// use512 is whether the AVX-512 forms of the loops that have one run
// (tests turn it off to compare them with the AVX2 loops).
var use512 = enabled && cpuid.X86.AVX512F

//go:noescape
func gelu512(x, y *float32, n int)

//go:noescape
func geluBackward512(dy, x, y *float32, n int)

//go:noescape
func biasGeluBF16x512(c, bias *float32, h, gl *uint16, n int)

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
func sumsAVX2(dy, x *float32, n, planes, stride int, m float64, out *[2]float64, mode int)

// normAVX2: mode 0, y = x*c[0] + c[1]; mode 1, y = (dy - c[0] - (x-c[1])*c[2]) * c[3];
// mode 2, y = x * (dy - c[0]) * c[1].
//
//go:noescape
func normAVX2(dy, x, y *float32, n, planes, stride int, c *[4]float32, mode int)

//go:noescape
func lnAffineAVX2(x, w, b, y *float32, n int, c *[2]float32)

//go:noescape
func lnGradAVX2(gy, w, x, y *float32, n int, c *[4]float32)

//go:noescape
func lnRowSumsAVX2(gy, w, x *float32, n int, m float64, out *[4]float64)

//go:noescape
func addAVX2(a, b, y *float32, n int)

//go:noescape
func colAddAVX2(acc *float64, x *float32, n int)

//go:noescape
func colAddRowsAVX2(acc *float64, x *float32, ld, rows, n int)

//go:noescape
func normColsRowsAVX2(sw, sb *float64, dy, x *float32, ld, rows, n int, mr *float64)

//go:noescape
func normColsAVX2(sw, sb *float64, dy, x *float32, n int, c *[2]float64)

//go:noescape
func maxAVX2(x *float32, n int, out *[8]float32)

//go:noescape
func packMaskAVX2(x *float32, mask *byte, n int, strict bool)

//go:noescape
func maskBackwardAVX2(gy, y *float32, mask *byte, n int, c float32, leaky bool)

//go:noescape
func maxPool3s2AVX2(r0, r1, r2 *float32, n int, y *float32, idx *int64, ib *[3]int32) (nan bool)

//go:noescape
func sumsBF16AVX2(dy *float32, x *uint16, n, planes, stride int, m float64, out *[2]float64, mode int)

//go:noescape
func normBF16AVX2(dy *float32, x *uint16, y *float32, n, planes, stride int, c *[4]float32, mode int)
