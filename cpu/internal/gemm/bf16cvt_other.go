//go:build !amd64 || purego

package gemm

var narrowAsm func(src *float32, blocks int, dst *uint16)
