//go:build !amd64 || purego

package gemm

// bf16Kernels lists the native bf16 kernels this CPU runs: none without
// amd64 assembly.
func bf16Kernels() []*bf16Kernel { return nil }

// hasAVX512BF16 is false without amd64 assembly.
func hasAVX512BF16() bool { return false }

// bf16PeakLoop has no loop to run without amd64 assembly.
func bf16PeakLoop(n int) {}

const bf16PeakChains = 16
