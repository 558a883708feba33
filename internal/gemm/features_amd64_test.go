//go:build amd64 && !purego

package gemm

func hasAVX2FMAForTest() bool { return hasAVX2FMA() }
