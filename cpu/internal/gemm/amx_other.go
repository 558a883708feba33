//go:build !amd64 || purego

package gemm

// amxProbe: no AMX kernel without amd64 assembly.
func amxProbe() (*bf16Kernel, amxModel, string) {
	return nil, 0, "AMX needs amd64 assembly (this build has none)"
}
