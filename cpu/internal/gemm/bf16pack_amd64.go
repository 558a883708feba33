//go:build amd64 && !purego

package gemm

// lanes8x16 is in bf16pack_amd64.s: for block b < blocks, lane i < 8 and
// q < 16, dst[(16b+q)*w+i] = the dword at byte offset offs[i]+64b+4q
// from src.
//
//go:noescape
func lanes8x16(src *uint16, offs *int, blocks int, dst *uint32, w int)

// lanesOK reports whether the CPU runs lanes8x16.
var lanesOK = hasAVX512()

// lanes calls lanes8x16 directly (through a func value its arguments
// would escape: an allocation per call).
func lanes(src *uint16, offs *int, blocks int, dst *uint32, w int) {
	lanes8x16(src, offs, blocks, dst, w)
}
