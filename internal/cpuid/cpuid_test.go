package cpuid

import (
	"os"
	"runtime"
	"strings"
	"testing"
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
	if X86 != got {
		t.Errorf("X86 = %+v, detect() = %+v", X86, got)
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
