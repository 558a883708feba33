//go:build amd64 && !purego

package gemm

//go:noescape
func fmaLoopAVX2(n int)

//go:noescape
func fmaLoopAVX512(n int)

// peakLoops lists the FMA loops this CPU runs, widest first, with the
// flops of one iteration.
func peakLoops() []peakLoop {
	var ls []peakLoop
	if hasAVX512() {
		ls = append(ls, peakLoop{"avx512", 12 * 16 * 2, fmaLoopAVX512})
	}
	if hasAVX2FMA() {
		ls = append(ls, peakLoop{"avx2", 12 * 8 * 2, fmaLoopAVX2})
	}
	return ls
}
