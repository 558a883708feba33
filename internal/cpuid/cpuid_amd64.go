//go:build amd64 && !purego

package cpuid

func cpuid(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)
func xgetbv() (eax, edx uint32)

func detect() Features {
	var f Features
	maxLeaf, _, _, _ := cpuid(0, 0)
	_, _, ecx1, _ := cpuid(1, 0)
	const (
		fma     = 1 << 12
		osxsave = 1 << 27
		avx     = 1 << 28
		f16c    = 1 << 29
	)
	if ecx1&(osxsave|avx) != osxsave|avx {
		return f
	}
	xcr0, _ := xgetbv()
	// XMM (bit 1) and YMM (bit 2) state saved by the OS.
	if xcr0&6 != 6 {
		return f
	}
	f.FMA = ecx1&fma != 0
	f.F16C = ecx1&f16c != 0
	if maxLeaf < 7 {
		return f
	}
	_, ebx7, _, _ := cpuid(7, 0)
	const (
		avx2    = 1 << 5
		avx512f = 1 << 16
	)
	f.AVX2 = ebx7&avx2 != 0
	// Opmask (bit 5) and the upper ZMM halves and registers (bits 6, 7).
	f.AVX512F = ebx7&avx512f != 0 && xcr0&0xe0 == 0xe0
	return f
}

const asm = true // the features come from CPUID
