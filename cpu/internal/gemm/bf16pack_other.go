//go:build !amd64 || purego

package gemm

var lanesAsm func(src *uint16, offs *int, blocks int, dst *uint32, w int)
