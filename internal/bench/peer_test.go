package bench

import (
	"bytes"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/internal/cpuid"
)

func TestParseOpenBLASCore(t *testing.T) {
	for _, c := range []struct {
		name, out, core string
		ok              bool
	}{
		{"haswell", "Core: Haswell\n", "Haswell", true},
		{"among other output", "some warning\nCore: SkylakeX\nPyTorch built with:\n", "SkylakeX", true},
		{"misdetection", "Core: Prescott\n", "Prescott", true},
		{"leading spaces, CRLF-less end", "  Core: Zen", "Zen", true},
		{"loaded twice: the last", "Core: Prescott\nCore: Cooperlake\n", "Cooperlake", true},
		{"no report (single-core build or no OpenBLAS)", "PyTorch built with:\n  - BLAS_INFO=open\n", "", false},
		{"not a core line", "Cores: 2\nCore count: 4\n", "", false},
		{"empty", "", "", false},
	} {
		core, ok := ParseOpenBLASCore(c.out)
		if core != c.core || ok != c.ok {
			t.Errorf("%s: ParseOpenBLASCore = %q, %v; want %q, %v", c.name, core, ok, c.core, c.ok)
		}
	}
}

func TestParseTorchConfig(t *testing.T) {
	debian := `PyTorch built with:
  - GCC 12.2
  - CPU capability usage: AVX2
  - Build settings: BLAS_INFO=open, BUILD_TYPE=Release, CXX_COMPILER=/usr/bin/c++, LAPACK_INFO=open, USE_MKLDNN=ON, USE_MPI=OFF, USE_OPENMP=ON,
`
	for _, c := range []struct {
		name, in, blas string
		onednn         bool
		capability     string
	}{
		{"debian", debian, "open", true, "AVX2"},
		{"mkl, no mkldnn", "Build settings: BLAS_INFO=mkl, USE_MKLDNN=OFF\n  - CPU capability usage: AVX512", "mkl", false, "AVX512"},
		{"nothing", "PyTorch built with:\n", "", false, ""},
	} {
		blas, dnn, capab := ParseTorchConfig(c.in)
		if blas != c.blas || dnn != c.onednn || capab != c.capability {
			t.Errorf("%s: ParseTorchConfig = %q, %v, %q; want %q, %v, %q", c.name, blas, dnn, capab, c.blas, c.onednn, c.capability)
		}
	}
}

// The peer gets OPENBLAS_CORETYPE only when OpenBLAS chose kernels
// narrower than the CPU runs, and never over the user's own setting.
func TestDecidePeer(t *testing.T) {
	avx2 := cpuid.Features{AVX2: true, FMA: true, F16C: true}
	skx := cpuid.Features{AVX2: true, FMA: true, AVX512F: true, AVX512BW: true, AVX512VL: true}
	spr := skx
	spr.AVX512BF16, spr.AMXTile, spr.AMXBF16 = true, true, true
	onlyF := cpuid.Features{AVX2: true, FMA: true, AVX512F: true} // no BW/VL: SkylakeX kernels cannot run
	for _, c := range []struct {
		name    string
		core    string
		user    string
		f       cpuid.Features
		wantSet string
	}{
		{"issue 17: Prescott on a Xeon with AVX512-BF16", "Prescott", "", spr, "Cooperlake"},
		{"Prescott on Skylake-X", "Prescott", "", skx, "SkylakeX"},
		{"Haswell on an AVX-512 CPU", "Haswell", "", skx, "SkylakeX"},
		{"Zen on Zen 3", "Zen", "", avx2, ""},
		{"Haswell on AVX2", "Haswell", "", avx2, ""},
		{"Sandybridge on AVX2", "Sandybridge", "", avx2, "Haswell"},
		{"SkylakeX on SPR", "SkylakeX", "", spr, ""},
		{"AVX512F without BW/VL: Haswell is right", "Haswell", "", onlyF, ""},
		{"user's choice kept", "Prescott", "Prescott", spr, ""},
		{"no report", "", "", spr, ""},
		{"unknown name", "Loongson3R4", "", spr, ""},
		{"case-insensitive", "PRESCOTT", "", avx2, "Haswell"},
	} {
		p := DecidePeer(PeerCheck{Core: c.core, UserSet: c.user}, c.f)
		if p.Set != c.wantSet {
			t.Errorf("%s: Set %q, want %q", c.name, p.Set, c.wantSet)
		}
		env := p.Env()
		if (c.wantSet == "") != (len(env) == 0) || c.wantSet != "" && env[0] != "OPENBLAS_CORETYPE="+c.wantSet {
			t.Errorf("%s: Env %q", c.name, env)
		}
		s := p.String()
		if c.wantSet != "" && (!strings.Contains(s, "misdetected") || !strings.Contains(s, c.wantSet) || !strings.Contains(s, "only")) {
			t.Errorf("%s: String %q does not say what it set", c.name, s)
		}
	}
}

func TestTablePeak(t *testing.T) {
	sg, _ := Lookup("sgemm")
	mlp, _ := Lookup("mlp")
	rows := []Comparison{
		{Workload: sg, Headroom: Merge([]Result{{Workload: "sgemm", Engine: Headroom, Work: 2e9, Flops: 2e9, Unit: "flop", Steps: []float64{0.02}}}),
			PyTorch: Merge([]Result{{Workload: "sgemm", Engine: PyTorch, Work: 2e9, Unit: "flop", Steps: []float64{0.04}}})},
		{Workload: mlp, Headroom: Merge([]Result{{Workload: "mlp", Engine: Headroom, Work: 128, Flops: 1e9, Unit: "samples", Steps: []float64{0.1, 0.1, 0.1}}}),
			PyTorch: Merge([]Result{{Workload: "mlp", Engine: PyTorch, Work: 128, Unit: "samples", Steps: []float64{0.2}}})},
	}
	// sgemm: 100 GFLOP/s headroom, 50 PyTorch; mlp: 10 and 5 GFLOP/s (the
	// PyTorch side counted with headroom's flops), of a 200 GFLOP/s peak.
	for _, c := range []struct {
		row  int
		m    Measurement
		want float64
	}{{0, rows[0].Headroom, 0.5}, {0, rows[0].PyTorch, 0.25}, {1, rows[1].Headroom, 0.05}, {1, rows[1].PyTorch, 0.025}} {
		if got := rows[c.row].PeakFraction(c.m, 200e9); !near(got, c.want) {
			t.Errorf("row %d %s: fraction %v, want %v", c.row, c.m.Engine, got, c.want)
		}
	}
	if got := rows[0].PeakFraction(rows[0].Headroom, 0); got != 0 {
		t.Errorf("no peak: %v", got)
	}
	var b bytes.Buffer
	if err := (Table{Peak: 200e9}).Write(&b, rows); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"headroom % of peak", "PyTorch % of peak", "50%", "25%", "5%", "±0%"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	// The fastest step's fraction is in brackets: a shared machine's
	// median step is slowed by other processes, the peak (best of its
	// tries) is not.
	spread := Comparison{Workload: sg, Headroom: Merge([]Result{{Workload: "sgemm", Engine: Headroom, Work: 2e9, Flops: 2e9, Unit: "flop", Steps: []float64{0.04, 0.02, 0.03}}})}
	if got := spread.BestPeakFraction(spread.Headroom, 200e9); !near(got, 0.5) {
		t.Errorf("best-step fraction %v, want 0.5", got)
	}
	if got := spread.PeakFraction(spread.Headroom, 200e9); !near(got, 1.0/3) {
		t.Errorf("median-step fraction %v, want 1/3", got)
	}
	b.Reset()
	if err := (Table{Peak: 200e9}).Write(&b, []Comparison{spread}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "33% [50%]") {
		t.Errorf("table lacks the median and best fractions %q:\n%s", "33% [50%]", b.String())
	}
	b.Reset()
	if err := (Table{}).Write(&b, rows); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "of peak") {
		t.Errorf("table without a peak has its columns:\n%s", b.String())
	}
}

// The implementation of the peer's BLAS, as Debian lays them out: torch
// links the generic libblas.so.3, which the alternatives system points at
// the reference BLAS unless an optimized one is installed.
func TestBLASLibrary(t *testing.T) {
	for _, c := range []struct {
		name, out, impl string
	}{
		{"openblas through the generic link", "Core: Cooperlake\nBLAS library: /usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3\n", "OpenBLAS"},
		{"reference (libblas3 only)", "PyTorch built with:\n  - BLAS_INFO=generic\nBLAS library: /usr/lib/x86_64-linux-gnu/blas/libblas.so.3.11.0\n", "reference"},
		{"blis", "BLAS library: /usr/lib/x86_64-linux-gnu/blis-pthread/libblas.so.3\n", "BLIS"},
		{"atlas", "BLAS library: /usr/lib/x86_64-linux-gnu/atlas/libblas.so.3\n", "ATLAS"},
		{"mkl", "BLAS library: /opt/intel/lib/libmkl_rt.so.2\n", "MKL"},
		{"a libblas elsewhere is not called the reference", "BLAS library: /opt/x/libblas.so.3\n", ""},
		{"none reported", "Core: Zen\n", ""},
	} {
		lib, _ := ParseBLASLibrary(c.out)
		if got := BLASLibrary(lib); got != c.impl {
			t.Errorf("%s: %q, want %q", c.name, got, c.impl)
		}
	}
	p := PeerCheck{BLAS: "generic", Impl: "OpenBLAS", Library: "/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3", Core: "Cooperlake"}
	if s := p.String(); !strings.Contains(s, "OpenBLAS: /usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3") || !strings.Contains(s, "core Cooperlake") {
		t.Errorf("String %q does not name the library and core", s)
	}
}

// Each limit headroom takes maps to the same level in each of PyTorch's
// three kernel libraries, and a user's own OPENBLAS_CORETYPE is kept.
func TestPeerLimit(t *testing.T) {
	for _, c := range []struct {
		isa  string
		user bool
		want string
	}{
		{"", false, ""},
		{"all", false, ""},
		{"avx2", false, "ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 OPENBLAS_CORETYPE=Haswell"},
		{"AVX2", true, "ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2"},
		{"avx512", false, "ONEDNN_MAX_CPU_ISA=AVX512_CORE ATEN_CPU_CAPABILITY=avx512 OPENBLAS_CORETYPE=SkylakeX"},
		{"avx512_bf16", false, "ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 ATEN_CPU_CAPABILITY=avx512 OPENBLAS_CORETYPE=Cooperlake"},
		{"none", false, "ONEDNN_MAX_CPU_ISA=SSE41 ATEN_CPU_CAPABILITY=default OPENBLAS_CORETYPE=Nehalem"},
	} {
		got := strings.Join(PeerLimit(c.isa, c.user), " ")
		if got != c.want {
			t.Errorf("PeerLimit(%q, %v) = %q, want %q", c.isa, c.user, got, c.want)
		}
	}
	// Every OpenBLAS core a limit names is one the level table knows, at
	// the limit's level: the limit is not itself a misdetection.
	for isa, lvl := range map[string]int{"avx2": LevelAVX2, "avx512": LevelAVX512, "avx512_bf16": LevelAVX512} {
		env := PeerLimit(isa, false)
		core := strings.TrimPrefix(env[len(env)-1], "OPENBLAS_CORETYPE=")
		if got := OpenBLASCoreLevel(core); got != lvl {
			t.Errorf("%s: core %s has level %d, want %d", isa, core, got, lvl)
		}
	}
	p := PeerCheck{BLAS: "generic", Core: "Haswell", MaxISA: "avx2", Limit: PeerLimit("avx2", false)}
	s := p.String()
	if !strings.Contains(s, "HEADROOM_MAX_ISA=avx2") || !strings.Contains(s, "ONEDNN_MAX_CPU_ISA=AVX2") || strings.Contains(s, "misdetected") {
		t.Errorf("String() = %q: want the limit named and no misdetection", s)
	}
	if env := strings.Join(p.Env(), " "); env != strings.Join(p.Limit, " ") {
		t.Errorf("Env() = %q, want the limit %q", env, strings.Join(p.Limit, " "))
	}
}
