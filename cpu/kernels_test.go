package cpu_test

import (
	"math"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/cpu"
)

// The entry points other packages use must reach the backend's kernels:
// a product that is checked by hand, and a kernel report that agrees
// with itself.
func TestKernelEntryPoints(t *testing.T) {
	a := []float32{1, 2, 3, 4}
	b := []float32{5, 6, 7, 8}
	c := []float32{1, 1, 1, 1}
	cpu.Sgemm(false, false, 2, 2, 2, 1, a, 2, b, 2, 1, c, 2)
	want := []float32{20, 23, 44, 51}
	for i := range want {
		if c[i] != want[i] {
			t.Fatalf("Sgemm: c = %v, want %v", c, want)
		}
	}
	k := cpu.GEMMKernel()
	switch k {
	case "avx512", "avx2", "go":
	default:
		t.Fatalf("GEMMKernel() = %q, want avx512, avx2 or go", k)
	}
	if s := cpu.KernelSummary(); !strings.Contains(s, "sgemm "+k) {
		t.Errorf("KernelSummary() = %q, does not name the sgemm kernel %q", s, k)
	}
	if s := cpu.KernelSummary(); !strings.Contains(s, "Winograd") {
		t.Errorf("KernelSummary() = %q, does not say whether Winograd convolutions run", s)
	}
	if got := cpu.Caps().AVX512; got != (k == "avx512") {
		t.Errorf("Caps().AVX512 = %v with kernel %q", got, k)
	}
}

// cpu.Adam's vectorized prefix must equal the scalar update written out
// in float32, element by element.
func TestAdamEntryPoint(t *testing.T) {
	const n = 19
	v, g, m, s := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range n {
		v[i], g[i], m[i], s[i] = float32(i)/7-1, float32(i%5)-2.5, float32(i)/100, float32(i)/50
	}
	c := &cpu.AdamConsts{B1: 0.9, OmB1: 0.1, B2: 0.999, OmB2: 0.001, BC2Sqrt: 0.5, Eps: 1e-8, NegStep: -0.01, Decay: 1}
	wantV := append([]float32(nil), v...)
	for i := range n {
		mi := g[i]*c.OmB1 + m[i]*c.B1
		si := (c.OmB2*g[i])*g[i] + s[i]*c.B2
		wantV[i] = v[i] + (c.NegStep*mi)/(float32(math.Sqrt(float64(si)))/c.BC2Sqrt+c.Eps)
	}
	done := cpu.Adam(v, g, m, s, c)
	if done < 0 || done > n {
		t.Fatalf("Adam updated %d of %d", done, n)
	}
	for i := range done {
		if d := v[i] - wantV[i]; d > 1e-6 || d < -1e-6 {
			t.Errorf("v[%d] = %v, want %v", i, v[i], wantV[i])
		}
	}
}
