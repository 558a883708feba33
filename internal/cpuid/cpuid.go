// Package cpuid reports the x86 vector extensions that both the CPU and the
// operating system support, for choosing assembly kernels at run time.
//
// A feature counts only when the OS saves its registers on a context switch
// (XGETBV's XCR0): a CPU with AVX-512 under an OS that does not save ZMM
// state must not run AVX-512 code. Builds with -tags purego, and every
// architecture but amd64, report no features, so that only portable Go
// runs there.
package cpuid

import (
	"strings"

	"github.com/headroom-ml/headroom/internal/env"
)

// Features are the extensions the kernels use.
type Features struct {
	AVX2    bool // with AVX and the OS saving YMM state
	FMA     bool // FMA3
	F16C    bool // VCVTPH2PS / VCVTPS2PH
	AVX512F bool // with the OS saving ZMM and opmask state
	// The rest need AVX512F as well (they are false without it).
	AVX512BW   bool // byte and word instructions
	AVX512VL   bool // EVEX encodings of 128- and 256-bit instructions
	AVX512BF16 bool // VDPBF16PS, VCVTNE2PS2BF16 (Cooper Lake, Sapphire Rapids, Zen 4)
	// AMX tiles (Sapphire Rapids): the CPU has them and the OS enabled
	// their state in XCR0. On Linux a process must still ask for the
	// permission (arch_prctl ARCH_REQ_XCOMP_PERM) before the first use.
	AMXTile bool
	AMXBF16 bool
}

// List names the features present, in the spelling of Linux's
// /proc/cpuinfo flags: "avx2 fma f16c avx512f ...".
func (f Features) List() []string {
	var out []string
	for _, c := range []struct {
		name string
		have bool
	}{
		{"avx2", f.AVX2}, {"fma", f.FMA}, {"f16c", f.F16C}, {"avx512f", f.AVX512F}, {"avx512bw", f.AVX512BW},
		{"avx512vl", f.AVX512VL}, {"avx512_bf16", f.AVX512BF16}, {"amx_tile", f.AMXTile}, {"amx_bf16", f.AMXBF16},
	} {
		if c.have {
			out = append(out, c.name)
		}
	}
	return out
}

// X86 is what this machine supports (all false off amd64 or under purego),
// limited by $HEADROOM_MAX_ISA. Kernels choose by it.
var X86 Features

// Detected is what the CPU and OS support, before $HEADROOM_MAX_ISA.
var Detected Features

// MaxISA is the limit $HEADROOM_MAX_ISA set ("" for none), and LimitErr
// its error when the value is not one Limit knows (no limit is applied
// then).
var (
	MaxISA   string
	LimitErr error
)

func init() {
	Detected = detect()
	X86 = Detected
	if s, ok := env.Lookup(env.MaxISA); ok {
		if f, err := Detected.Limit(s); err != nil {
			LimitErr = err
		} else {
			X86, MaxISA = f, strings.ToLower(strings.TrimSpace(s))
		}
	}
}

// ISAs are the limits Limit takes, narrowest first: an AVX2 machine's
// kernels on an AVX-512 one ("avx2"), AVX-512 without bf16 ("avx512"),
// without AMX ("avx512_bf16"), or everything ("all"). "none" leaves only
// portable Go.
var ISAs = []string{"none", "avx2", "avx512", "avx512_bf16", "all"}

// Limit is f without the extensions above isa (one of ISAs, any case), so
// that one machine can run the kernels of a narrower one: for comparisons
// (oneDNN's ONEDNN_MAX_CPU_ISA is the same idea) and for testing the
// narrower paths.
func (f Features) Limit(isa string) (Features, error) {
	switch strings.ToLower(strings.TrimSpace(isa)) {
	case "none":
		return Features{}, nil
	case "avx2":
		return Features{AVX2: f.AVX2, FMA: f.FMA, F16C: f.F16C}, nil
	case "avx512":
		f.AVX512BF16, f.AMXTile, f.AMXBF16 = false, false, false
		return f, nil
	case "avx512_bf16":
		f.AMXTile, f.AMXBF16 = false, false
		return f, nil
	case "all":
		return f, nil
	}
	return f, &env.Error{Name: env.MaxISA, Value: isa, Want: "one of " + strings.Join(ISAs, ", ")}
}

// AVX2FMA reports whether the AVX2+FMA kernels can run.
func (f Features) AVX2FMA() bool { return f.AVX2 && f.FMA }
