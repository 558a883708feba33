//go:build amd64 && !purego

package gemm

import "github.com/headroom-ml/headroom/internal/cpuid"

// sgemmKernel6x16 is the AVX2+FMA micro-kernel in kernel_amd64.s. It reads
// 6*k floats at a and 16*k at b, and reads/writes the 6x16 tile at c (row
// stride ldc): c = alpha*(A·B) + beta*c, or alpha*(A·B) when beta0 != 0.
//
//go:noescape
func sgemmKernel6x16(k int, a, b, c *float32, ldc int, alpha, beta float32, beta0 int)

// hasAVX2FMA reports whether the CPU and OS support AVX2 and FMA3.
func hasAVX2FMA() bool { return cpuid.X86.AVX2FMA() }

// TODO(avx512): a 6x32 (or 14x32/28x16) AVX-512 kernel would roughly double
// the per-core peak on CPUs that have it; not written because the
// development machine (AMD Zen 3) has no AVX-512 to test it on.

var kernAVX2 = &kernel[float32]{
	name: "avx2",
	mr:   6,
	nr:   16,
	fn: func(k int, a, b, c []float32, ldc int, alpha, beta float32, beta0 bool) {
		// Bounds the assembly relies on; cheap next to the 192*k flops.
		_ = a[6*k-1]
		_ = b[16*k-1]
		_ = c[5*ldc+15]
		z := 0
		if beta0 {
			z = 1
		}
		sgemmKernel6x16(k, &a[0], &b[0], &c[0], ldc, alpha, beta, z)
	},
	packBT: packT16AVX,
}

func init() {
	if hasAVX2FMA() {
		sgemmKern = kernAVX2
	}
}

// packT16 is in pack_amd64.s: for 16 rows of src (stride ld) and 8*blocks
// columns, dst[16*p+r] = src[r*ld+p].
//
//go:noescape
func packT16(src *float32, ld int, blocks int, dst *float32)

// packT16AVX packs 16 full rows of a transposed B: dst[16*p+r] =
// x[off+r*ld+p] for p < kc.
func packT16AVX(x []float32, ld, off, kc int, dst []float32) {
	_ = x[off+15*ld+kc-1]
	_ = dst[16*kc-1]
	blocks := kc / 8
	if blocks > 0 {
		packT16(&x[off], ld, blocks, &dst[0])
	}
	for p := blocks * 8; p < kc; p++ {
		d := dst[16*p : 16*p+16 : 16*p+16]
		for r := range d {
			d[r] = x[off+r*ld+p]
		}
	}
}

// sconvTile6x16 is the direct-convolution micro-kernel in conv_amd64.s.
//
//go:noescape
func sconvTile6x16(k int, a, b *float32, offs *int32, c *float32, ldc int)

// sconvTile4x16 is sconvTile6x16 for 4 rows.
//
//go:noescape
func sconvTile4x16(k int, a, b *float32, offs *int32, c *float32, ldc int)

var convTile, convTile4 func(k int, a, b *float32, offs *int32, c *float32, ldc int)

func init() {
	if hasAVX2FMA() {
		convTile, convTile4 = sconvTile6x16, sconvTile4x16
	}
}

// sconvWgrad4x3 is the direct weight-gradient kernel in conv_amd64.s.
//
//go:noescape
func sconvWgrad4x3(gy *float32, ldk int, x *float32, dw, wp, ow, oh int, out *float32)

var convWgrad func(gy *float32, ldk int, x *float32, dw, wp, ow, oh int, out *float32)

func init() {
	if hasAVX2FMA() {
		convWgrad = sconvWgrad4x3
	}
}
