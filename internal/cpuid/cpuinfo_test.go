package cpuid

import (
	"slices"
	"strings"
	"testing"
)

func TestParseCPUInfo(t *testing.T) {
	zen3 := `processor	: 0
vendor_id	: AuthenticAMD
cpu family	: 25
model name	: AMD EPYC 7B13
flags		: fpu sse2 avx fma avx2 f16c

processor	: 1
vendor_id	: AuthenticAMD
model name	: Some Other CPU
flags		: fpu avx512f
`
	spr := "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz\n" +
		"flags\t\t: avx2 fma avx512f avx512bw avx512vl avx512_bf16 amx_bf16 amx_tile\n"
	arm := "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd bf16\nCPU implementer\t: 0x41\n\nModel\t: Raspberry Pi 4\n"
	for _, c := range []struct {
		name, in, model, vendor string
		has, hasNot             []string
	}{
		{"zen3, first block only", zen3, "AMD EPYC 7B13", "AuthenticAMD", []string{"avx2", "fma"}, []string{"avx512f", "avx512_bf16"}},
		{"sapphire rapids", spr, "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz", "GenuineIntel", []string{"avx512_bf16", "amx_tile"}, []string{"avx512_fp16"}},
		{"arm64 Features, Model in a later block", arm, "", "", []string{"asimd", "bf16"}, []string{"avx2"}},
		{"padded brand", "model name\t:   Intel(R)  Core(TM)\x00\x00  \n", "Intel(R) Core(TM)", "", nil, []string{"fma"}},
		{"empty", "", "", "", nil, []string{"avx2"}},
		{"garbage lines", "no colon here\n: empty key\nflags:\n", "", "", nil, []string{""}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseCPUInfo(strings.NewReader(c.in))
			if err != nil {
				t.Fatal(err)
			}
			if got.ModelName != c.model || got.Vendor != c.vendor {
				t.Errorf("model %q vendor %q, want %q %q", got.ModelName, got.Vendor, c.model, c.vendor)
			}
			for _, f := range c.has {
				if !got.Has(f) {
					t.Errorf("lacks %s", f)
				}
			}
			for _, f := range c.hasNot {
				if got.Has(f) {
					t.Errorf("has %s", f)
				}
			}
		})
	}
}

func TestFeatureList(t *testing.T) {
	for _, c := range []struct {
		f    Features
		want []string
	}{
		{Features{}, nil},
		{Features{AVX2: true, FMA: true, F16C: true}, []string{"avx2", "fma", "f16c"}},
		{Features{AVX2: true, FMA: true, AVX512F: true, AVX512BW: true, AVX512VL: true, AVX512BF16: true, AMXTile: true, AMXBF16: true},
			[]string{"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_bf16", "amx_tile", "amx_bf16"}},
	} {
		if got := c.f.List(); !slices.Equal(got, c.want) {
			t.Errorf("%+v.List() = %v, want %v", c.f, got, c.want)
		}
	}
	if ModelName() == "" {
		t.Error("ModelName is empty")
	}
}
