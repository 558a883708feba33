package gemm

import "fmt"

// PackLanes8 writes 8 lanes of an A or B panel of w lanes whose pairs lie
// along memory: for q < 16*blocks and lane i < 8, dst[q*w+i] = the pair
// (dword) at src[offs[i]+2q], src[offs[i]+2q+1] (offsets in values, any
// parity). It reports false, writing nothing, where the CPU has no
// assembly for it (the caller packs otherwise).
func PackLanes8(src []uint16, offs *[8]int, blocks int, dst []uint32, w int) bool {
	if !lanesOK || blocks <= 0 {
		return false
	}
	var bo [8]int
	for i, o := range offs {
		if o < 0 || o+32*blocks > len(src) {
			panic(fmt.Sprintf("gemm: PackLanes8 lane %d reads [%d, %d) of %d values", i, o, o+32*blocks, len(src)))
		}
		bo[i] = 2 * o
	}
	if w < 8 || len(dst) < (16*blocks-1)*w+8 {
		panic(fmt.Sprintf("gemm: PackLanes8 writes %d lanes of %d dwords into %d", w, 16*blocks, len(dst)))
	}
	lanes(&src[0], &bo[0], blocks, &dst[0], w)
	return true
}
