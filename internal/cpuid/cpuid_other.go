//go:build !amd64 || purego

package cpuid

func detect() Features { return Features{} }

const asm = false // no CPUID without assembly
