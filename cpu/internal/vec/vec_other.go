//go:build !amd64 || purego

package vec

const enabled = false

var use512 = false

func gelu512(x, y *float32, n int)             { panic("vec: no assembly") }
func geluBackward512(dy, x, y *float32, n int) { panic("vec: no assembly") }

func biasGeluBF16x512(c, bias *float32, h, gl *uint16, n int) { panic("vec: no assembly") }

func geluAVX2(x, y *float32, n int)             { panic("vec: no assembly") }
func geluBackwardAVX2(dy, x, y *float32, n int) { panic("vec: no assembly") }

func adamAVX2(v, grad, m, s *float32, n int, c *AdamConsts) { panic("vec: no assembly") }

func expAffineAVX2(x, y *float32, n int, ab *[2]float32) { panic("vec: no assembly") }

func reluAVX2(x, y *float32, n int)                 { panic("vec: no assembly") }
func reluBackwardAVX2(dy, s, y *float32, n int)     { panic("vec: no assembly") }
func leakyAVX2(dy, x, y *float32, n int, c float32) { panic("vec: no assembly") }
func sumsAVX2(dy, x *float32, n, planes, stride int, m float64, out *[2]float64, mode int) {
	panic("vec: no assembly")
}

func normAVX2(dy, x, y *float32, n, planes, stride int, c *[4]float32, mode int) {
	panic("vec: no assembly")
}

func addAVX2(a, b, y *float32, n int) { panic("vec: no assembly") }

func lnAffineAVX2(x, w, b, y *float32, n int, c *[2]float32) { panic("vec: no assembly") }

func colAddAVX2(acc *float64, x *float32, n int)               { panic("vec: no assembly") }
func colAddRowsAVX2(acc *float64, x *float32, ld, rows, n int) { panic("vec: no assembly") }
func normColsRowsAVX2(sw, sb *float64, dy, x *float32, ld, rows, n int, mr *float64) {
	panic("vec: no assembly")
}
func normColsAVX2(sw, sb *float64, dy, x *float32, n int, c *[2]float64) { panic("vec: no assembly") }

func maxAVX2(x *float32, n int, out *[8]float32) { panic("vec: no assembly") }

func lnGradAVX2(gy, w, x, y *float32, n int, c *[4]float32)              { panic("vec: no assembly") }
func lnRowSumsAVX2(gy, w, x *float32, n int, m float64, out *[4]float64) { panic("vec: no assembly") }

func packMaskAVX2(x *float32, mask *byte, n int, strict bool) { panic("vec: no assembly") }
func maskBackwardAVX2(gy, y *float32, mask *byte, n int, c float32, leaky bool) {
	panic("vec: no assembly")
}

func maxPool3s2AVX2(r0, r1, r2 *float32, n int, y *float32, idx *int64, ib *[3]int32) bool {
	panic("vec: no assembly")
}

func sumsBF16AVX2(dy *float32, x *uint16, n, planes, stride int, m float64, out *[2]float64, mode int) {
	panic("vec: no assembly")
}

func normBF16AVX2(dy *float32, x *uint16, y *float32, n, planes, stride int, c *[4]float32, mode int) {
	panic("vec: no assembly")
}
