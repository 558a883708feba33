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
	eax7, ebx7, _, edx7 := cpuid(7, 0)
	const (
		avx2     = 1 << 5
		avx512f  = 1 << 16
		avx512bw = 1 << 30
		avx512vl = 1 << 31
		amxBF16  = 1 << 22 // edx
		amxTile  = 1 << 24 // edx
	)
	f.AVX2 = ebx7&avx2 != 0
	// Opmask (bit 5) and the upper ZMM halves and registers (bits 6, 7).
	f.AVX512F = ebx7&avx512f != 0 && xcr0&0xe0 == 0xe0
	if f.AVX512F {
		f.AVX512BW = ebx7&avx512bw != 0
		f.AVX512VL = ebx7&avx512vl != 0
		if eax7 >= 1 {
			eax71, _, _, _ := cpuid(7, 1)
			f.AVX512BF16 = eax71&(1<<5) != 0
		}
	}
	// XTILECFG (bit 17) and XTILEDATA (bit 18) state enabled by the OS.
	if edx7&amxTile != 0 && xcr0&(3<<17) == 3<<17 {
		f.AMXTile = true
		f.AMXBF16 = edx7&amxBF16 != 0
	}
	return f
}

// Brand is the processor's brand string (CPUID leaves 0x80000002 to
// 0x80000004), e.g. "AMD EPYC 7B13 64-Core Processor"; "" if it has none.
func Brand() string {
	if max, _, _, _ := cpuid(0x80000000, 0); max < 0x80000004 {
		return ""
	}
	var b []byte
	for leaf := uint32(0x80000002); leaf <= 0x80000004; leaf++ {
		a, bx, c, d := cpuid(leaf, 0)
		for _, r := range []uint32{a, bx, c, d} {
			b = append(b, byte(r), byte(r>>8), byte(r>>16), byte(r>>24))
		}
	}
	return cleanBrand(string(b))
}

const asm = true // the features come from CPUID
