//go:build !amd64 || purego

package cpuid

func detect() Features { return Features{} }

const asm = false // no CPUID without assembly

// Brand is "" without CPUID; CPUInfo's model name may still say.
func Brand() string { return "" }
