//go:build !amd64 || purego

package gemm

var lanesOK = false

func lanes(src *uint16, offs *int, blocks int, dst *uint32, w int) {
	panic("gemm: no lanes8x16 here")
}
