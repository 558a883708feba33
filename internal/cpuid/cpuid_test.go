package cpuid

import (
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/internal/env"
)

// The features found must agree with the flags Linux reports for the CPU,
// which it derives from CPUID and clears when the kernel does not save the
// registers (so the OS check matches too).
func TestMatchesProcCPUInfo(t *testing.T) {
	if !asm {
		if X86 != (Features{}) {
			t.Fatalf("X86 = %+v without assembly, want no features", X86)
		}
		return
	}
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skip("compares against Linux's /proc/cpuinfo on amd64")
	}
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Skipf("no /proc/cpuinfo: %v", err)
	}
	flags := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "flags" {
			for _, f := range strings.Fields(v) {
				flags[f] = true
			}
			break
		}
	}
	if len(flags) == 0 {
		t.Fatal("no flags line in /proc/cpuinfo")
	}
	got := detect()
	if Detected != got {
		t.Errorf("Detected = %+v, detect() = %+v", Detected, got)
	}
	for _, c := range []struct {
		name string
		have bool
	}{{"avx2", got.AVX2}, {"fma", got.FMA}, {"f16c", got.F16C}, {"avx512f", got.AVX512F},
		{"avx512bw", got.AVX512BW}, {"avx512vl", got.AVX512VL}, {"avx512_bf16", got.AVX512BF16}, {"amx_tile", got.AMXTile}, {"amx_bf16", got.AMXBF16}} {
		if c.have != flags[c.name] {
			t.Errorf("%s: detected %v, /proc/cpuinfo says %v", c.name, c.have, flags[c.name])
		}
	}
}

// Limit keeps exactly the extensions at or below the level named, whatever
// the machine has; an unknown name is an error that leaves f alone.
func TestLimit(t *testing.T) {
	all := Features{AVX2: true, FMA: true, F16C: true, AVX512F: true, AVX512BW: true, AVX512VL: true,
		AVX512BF16: true, AMXTile: true, AMXBF16: true}
	avx2 := Features{AVX2: true, FMA: true, F16C: true}
	avx512 := Features{AVX2: true, FMA: true, F16C: true, AVX512F: true, AVX512BW: true, AVX512VL: true}
	bf16 := avx512
	bf16.AVX512BF16 = true
	for _, c := range []struct {
		isa      string
		in, want Features
	}{
		{"none", all, Features{}},
		{"avx2", all, avx2},
		{"AVX2", all, avx2},
		{" avx512 ", all, avx512},
		{"avx512_bf16", all, bf16},
		{"all", all, all},
		{"avx512", avx2, avx2}, // never adds what the machine lacks
		{"avx2", Features{F16C: true}, Features{F16C: true}},
	} {
		got, err := c.in.Limit(c.isa)
		if err != nil || got != c.want {
			t.Errorf("%+v.Limit(%q) = %+v, %v; want %+v", c.in, c.isa, got, err, c.want)
		}
	}
	got, err := all.Limit("sse4")
	if !errors.Is(err, env.ErrValue) || got != all || !strings.Contains(err.Error(), "avx512_bf16") {
		t.Errorf("Limit(sse4) = %+v, %v; want the features unchanged and an error listing the choices", got, err)
	}
	if MaxISA == "" && LimitErr == nil && X86 != Detected {
		t.Errorf("no limit set, but X86 %+v != Detected %+v", X86, Detected)
	}
}
