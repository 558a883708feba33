// Package cpuid reports the x86 vector extensions that both the CPU and the
// operating system support, for choosing assembly kernels at run time.
//
// A feature counts only when the OS saves its registers on a context switch
// (XGETBV's XCR0): a CPU with AVX-512 under an OS that does not save ZMM
// state must not run AVX-512 code. Builds with -tags purego, and every
// architecture but amd64, report no features, so that only portable Go
// runs there.
package cpuid

// Features are the extensions the kernels use.
type Features struct {
	AVX2    bool // with AVX and the OS saving YMM state
	FMA     bool // FMA3
	F16C    bool // VCVTPH2PS / VCVTPS2PH
	AVX512F bool // with the OS saving ZMM and opmask state
}

// X86 is what this machine supports (all false off amd64 or under purego).
var X86 = detect()

// AVX2FMA reports whether the AVX2+FMA kernels can run.
func (f Features) AVX2FMA() bool { return f.AVX2 && f.FMA }
