package cpu

import (
	"reflect"

	blas "github.com/headroom-ml/headroom/cpu/internal/gemm"
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

func init() {
	Floats[*prim.MatMul](matmulKernel[float32], matmulKernel[float64])
	fusedEpilogue[reflect.TypeFor[*prim.MatMul]()] = matmulEpilogue
}

// matmulEpilogue runs a fused program after a product: on each block of
// C's rows as soon as the bf16 product finished it (while it is in
// cache; the pass over gpt's [2048, 1536] products' outputs cost about a
// tenth of their time), else in a pass of its own.
func matmulEpilogue(pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, ws []byte, epi func(lo, hi int)) error {
	if mixedProduct(in, out) {
		return matmulMixed(pool, n, in, out, epi)
	}
	if err := runOn(pool, n, in, out, ws); err != nil {
		return err
	}
	pool.For(out[0].Shape.NumElements(), elemGrain/16, epi)
	return nil
}

// mixedProduct reports whether a product's operands are narrower than C
// (16-bit operands converted as the kernel packs them).
func mixedProduct(in, out []*tensor.Tensor) bool {
	return in[0].DType != out[0].DType || in[1].DType != out[0].DType
}

// matmulMixed runs a mixed product a batch at a time. With epi, each
// batch's rows of C go to epi as the bf16 product finishes them
// (blas.SgemmMixedRows), or in a pass after the product where it cannot.
func matmulMixed(pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, epi func(lo, hi int)) error {
	o := n.Op.(*prim.MatMul)
	as, bs := in[0].Shape, in[1].Shape
	batch, m, k, nn, err := o.Dims(as, bs)
	if err != nil {
		return err
	}
	lda, ldb := as[len(as)-1], bs[len(bs)-1]
	aOffs := offsets(batch, bstrides(as[:len(as)-2], batch))
	bOffs := offsets(batch, bstrides(bs[:len(bs)-2], batch))
	aMat, bMat := as[len(as)-2]*as[len(as)-1], bs[len(bs)-2]*bs[len(bs)-1]
	c := out[0].F32()
	for bi, ao := range aOffs {
		a, b := gemmOperand(in[0], ao*aMat), gemmOperand(in[1], bOffs[bi]*bMat)
		base := bi * m * nn
		if epi == nil {
			blas.SgemmMixed(o.TransA, o.TransB, m, nn, k, 1, a, lda, b, ldb, 0, c[base:], nn, pool)
			continue
		}
		rows := func(i0, i1 int) { epi(base+i0*nn, base+i1*nn) }
		if !blas.SgemmMixedRows(o.TransA, o.TransB, m, nn, k, 1, a, lda, b, ldb, 0, c[base:], nn, pool, rows) {
			pool.For(m, max(1, elemGrain/16/max(1, nn)), rows)
		}
	}
	return nil
}

// gemm computes C = op(A) op(B) (overwriting C), row-major.
func gemm[T Float](pool *parallel.Pool, transA, transB bool, m, n, k int, a []T, lda int, b []T, ldb int, c []T, ldc int) {
	switch a := any(a).(type) {
	case []float32:
		sgemm(pool, transA, transB, m, n, k, a, lda, any(b).([]float32), ldb, any(c).([]float32), ldc)
	case []float64:
		dgemm(pool, transA, transB, m, n, k, a, lda, any(b).([]float64), ldb, any(c).([]float64), ldc)
	}
}

func matmulKernel[T Float](pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	if mixedProduct(in, out) {
		return matmulMixed(pool, n, in, out, nil)
	}
	o := n.Op.(*prim.MatMul)
	as, bs := in[0].Shape, in[1].Shape
	batch, m, k, nn, err := o.Dims(as, bs)
	if err != nil {
		return err
	}
	lda, ldb := as[len(as)-1], bs[len(bs)-1]
	aBatch := bstrides(as[:len(as)-2], batch)
	bBatch := bstrides(bs[:len(bs)-2], batch)
	aMat, bMat := as[len(as)-2]*as[len(as)-1], bs[len(bs)-2]*bs[len(bs)-1]
	bOffs := offsets(batch, bBatch)
	a, b, c := slice[T](in[0]), slice[T](in[1]), slice[T](out[0])
	for bi, ao := range offsets(batch, aBatch) {
		bo := bOffs[bi]
		gemm(pool, o.TransA, o.TransB, m, nn, k, a[ao*aMat:], lda, b[bo*bMat:], ldb, c[bi*m*nn:], nn)
	}
	return nil
}

// gemmOperand is t's elements from off as a GEMM operand (float32,
// bfloat16 or float16).
func gemmOperand(t *tensor.Tensor, off int) blas.Matrix {
	switch t.DType {
	case tensor.BFloat16:
		return blas.BF16(t.U16()[off:])
	case tensor.Float16:
		return blas.F16(t.U16()[off:])
	}
	return blas.F32(t.F32()[off:])
}

func sgemm(pool *parallel.Pool, transA, transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	blas.Sgemm(transA, transB, m, n, k, 1, a, lda, b, ldb, 0, c, ldc, pool)
}

func dgemm(pool *parallel.Pool, transA, transB bool, m, n, k int, a []float64, lda int, b []float64, ldb int, c []float64, ldc int) {
	blas.Dgemm(transA, transB, m, n, k, 1, a, lda, b, ldb, 0, c, ldc, pool)
}
