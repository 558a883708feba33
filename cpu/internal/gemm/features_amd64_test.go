//go:build amd64 && !purego

package gemm

func asmKernelsForTest() []*kernel[float32] { return asmKernels() }
