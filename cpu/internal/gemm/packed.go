package gemm

import "fmt"

// Products on operands packed by the caller. A batched product whose
// operands are produced by a transform (Winograd convolution: 36 products
// per chunk of tiles, the same A for every chunk) writes them straight into
// the micro-kernel's panel layout and calls the micro-kernel here, with no
// copy into Sgemm's packing buffers and no per-call blocking.

// Tile returns the float32 micro-kernel's tile: MR rows of A, NR columns
// of B. A panels hold k groups of MR values (a[p*MR+i] = A[i][p]), B
// panels k groups of NR values (b[p*NR+j] = B[p][j]).
func Tile() (mr, nr int) { return sgemmKern.mr, sgemmKern.nr }

// KernelPacked computes the MR×NR tile of c at row stride ldc as
// c = A·B (acc false: c is not read) or c += A·B (acc true), for an A
// panel a of MR×k and a B panel b of k×NR in Tile's layouts. It is the
// micro-kernel Sgemm runs, so the sums are rounded as Sgemm's.
func KernelPacked(k int, a, b, c []float32, ldc int, acc bool) {
	kern := sgemmKern
	mr, nr := kern.mr, kern.nr
	if k <= 0 {
		if !acc {
			for i := 0; i < mr; i++ {
				clear(c[i*ldc : i*ldc+nr])
			}
		}
		return
	}
	if len(a) < mr*k || len(b) < nr*k || ldc < nr || len(c) < (mr-1)*ldc+nr {
		panic(fmt.Sprintf("gemm: KernelPacked: buffers too short (k %d, a %d, b %d, c %d, ldc %d)", k, len(a), len(b), len(c), ldc))
	}
	var beta float32
	if acc {
		beta = 1
	}
	kern.fn(k, a, b, c, ldc, 1, beta, !acc)
}
