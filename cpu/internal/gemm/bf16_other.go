//go:build !amd64 || purego

package gemm

// bf16Kernels lists the native bf16 kernels this CPU runs: none without
// amd64 assembly.
func bf16Kernels() []*bf16Kernel { return nil }
