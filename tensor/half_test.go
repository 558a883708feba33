package tensor_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/headroom-ml/headroom/safetensors"
	"github.com/headroom-ml/headroom/tensor"
)

// halfRef is written by PyTorch: /usr/bin/python3 scripts/reference/tensor_ref.py.
// See that script for what each tensor holds.
const halfRef = "testdata/half.safetensors"

func loadHalfRef(t *testing.T) map[string]*tensor.Tensor {
	t.Helper()
	ref, err := safetensors.Load(halfRef)
	if err != nil {
		t.Fatal(err)
	}
	for name, dt := range map[string]tensor.DType{
		"f32": tensor.Float32, "f16": tensor.Float16, "bf16": tensor.BFloat16, "bf16_scalar": tensor.BFloat16,
		"f16_to_f32": tensor.Float32, "bf16_to_f32": tensor.Float32, "n_edge": tensor.Int64,
	} {
		if ref[name] == nil || ref[name].DType != dt {
			t.Fatalf("%s: tensor %q missing or not %v", halfRef, name, dt)
		}
	}
	// Guard against a regenerated file that silently lost its cases.
	if n := len(ref["f32"].F32()); n < 10000 || ref["n_edge"].I64()[0] < 100 {
		t.Fatalf("%s holds only %d values, %d edge cases", halfRef, n, ref["n_edge"].I64()[0])
	}
	return ref
}

// mismatches collects failures and reports the first few, so one broken
// rounding rule does not print ten thousand lines.
type mismatches struct {
	t    *testing.T
	what string
	n    int
}

func (m *mismatches) add(format string, args ...any) {
	m.n++
	if m.n <= 20 {
		m.t.Errorf("%s: %s", m.what, fmt.Sprintf(format, args...))
	}
}

func (m *mismatches) done(total int) {
	if m.n > 20 {
		m.t.Errorf("%s: %d of %d values wrong (first 20 shown)", m.what, m.n, total)
	}
}

func TestFloat32ToFloat16MatchesTorch(t *testing.T) {
	ref := loadHalfRef(t)
	in, want := ref["f32"].F32(), ref["f16"].U16()
	m := mismatches{t: t, what: "Float32ToFloat16"}
	for i, x := range in {
		// Both of PyTorch's CPU paths agree for float16, NaNs included
		// (sign kept, quiet NaN 0x7e00), so every bit pattern must match.
		if got := tensor.Float32ToFloat16(x); got != want[i] {
			m.add("input %#08x (%g): got %#04x, torch %#04x", math.Float32bits(x), x, got, want[i])
		}
	}
	m.done(len(in))
}

func TestFloat32ToBFloat16MatchesTorch(t *testing.T) {
	ref := loadHalfRef(t)
	in, vec, scalar := ref["f32"].F32(), ref["bf16"].U16(), ref["bf16_scalar"].U16()
	m := mismatches{t: t, what: "Float32ToBFloat16"}
	for i, x := range in {
		got := tensor.Float32ToBFloat16(x)
		// PyTorch has two encodings of a bfloat16 NaN: its vectorized CPU
		// kernel writes 0xffff, the scalar c10::BFloat16 conversion 0x7fc0.
		// We follow the scalar one; for everything else both agree.
		if got != scalar[i] {
			m.add("input %#08x (%g): got %#04x, torch (scalar) %#04x", math.Float32bits(x), x, got, scalar[i])
		}
		if x == x && got != vec[i] {
			m.add("input %#08x (%g): got %#04x, torch (vectorized) %#04x", math.Float32bits(x), x, got, vec[i])
		}
		if vecNaN := vec[i]&0x7fff > 0x7f80; vecNaN != (x != x) {
			m.add("input %#08x: torch's vectorized result %#04x disagrees with the input on NaN-ness", math.Float32bits(x), vec[i])
		}
	}
	m.done(len(in))
}

func TestFloat16ToFloat32MatchesTorch(t *testing.T) {
	want := loadHalfRef(t)["f16_to_f32"].F32()
	m := mismatches{t: t, what: "Float16ToFloat32"}
	for h := range 1 << 16 {
		if got := tensor.Float16ToFloat32(uint16(h)); math.Float32bits(got) != math.Float32bits(want[h]) {
			m.add("input %#04x: got %#08x (%g), torch %#08x (%g)", h, math.Float32bits(got), got, math.Float32bits(want[h]), want[h])
		}
	}
	m.done(1 << 16)
}

func TestBFloat16ToFloat32MatchesTorch(t *testing.T) {
	want := loadHalfRef(t)["bf16_to_f32"].F32()
	m := mismatches{t: t, what: "BFloat16ToFloat32"}
	for h := range 1 << 16 {
		if got := tensor.BFloat16ToFloat32(uint16(h)); math.Float32bits(got) != math.Float32bits(want[h]) {
			m.add("input %#04x: got %#08x (%g), torch %#08x (%g)", h, math.Float32bits(got), got, math.Float32bits(want[h]), want[h])
		}
	}
	m.done(1 << 16)
}

// Every half value converts to float32 and back unchanged; NaNs stay NaN.
func TestHalfRoundTrip(t *testing.T) {
	for h := range 1 << 16 {
		h := uint16(h)
		if got := tensor.Float32ToFloat16(tensor.Float16ToFloat32(h)); got != h && !(isNaN16(h) && isNaN16(got)) {
			t.Errorf("float16 %#04x -> %g -> %#04x", h, tensor.Float16ToFloat32(h), got)
		}
		if got := tensor.Float32ToBFloat16(tensor.BFloat16ToFloat32(h)); got != h && !(isNaNBF16(h) && isNaNBF16(got)) {
			t.Errorf("bfloat16 %#04x -> %g -> %#04x", h, tensor.BFloat16ToFloat32(h), got)
		}
	}
}

func isNaN16(h uint16) bool   { return h&0x7fff > 0x7c00 }
func isNaNBF16(h uint16) bool { return h&0x7fff > 0x7f80 }

// A few conversions spelled out, so a failure reads as a rule rather than
// as a bit pattern from the reference file.
func TestHalfRules(t *testing.T) {
	tests := []struct {
		name     string
		in       float32
		f16, b16 uint16
	}{
		{"one", 1, 0x3c00, 0x3f80},
		{"negative zero", float32(math.Copysign(0, -1)), 0x8000, 0x8000},
		{"float16 max", 65504, 0x7bff, 0x4780},
		{"float16 tie below max rounds to max (even)", 65504 + 8, 0x7bff, 0x4780},
		{"float16 tie at max rounds to inf", 65520, 0x7c00, 0x4780},
		{"float16 min subnormal", 0x1p-24, 0x0001, 0x3380},
		{"half the min subnormal ties to zero", 0x1p-25, 0x0000, 0x3300},
		{"three halves of the min subnormal ties to two", 0x3p-25, 0x0002, 0x33c0},
		{"float16 tie 1+2^-11 rounds to even 1", 1 + 0x1p-11, 0x3c00, 0x3f80},
		{"bfloat16 tie 1+2^-8 rounds to even 1", 1 + 0x1p-8, 0x3c04, 0x3f80},
		{"bfloat16 tie 1+3*2^-8 rounds up", 1 + 0x3p-8, 0x3c0c, 0x3f82},
		{"float32 max", math.MaxFloat32, 0x7c00, 0x7f80},
		{"inf", float32(math.Inf(-1)), 0xfc00, 0xff80},
		{"NaN", float32(math.NaN()), 0x7e00, 0x7fc0},
		{"NaN with a payload below the bfloat16 bits", math.Float32frombits(0x7f800001), 0x7e00, 0x7fc0},
	}
	for _, tc := range tests {
		if got := tensor.Float32ToFloat16(tc.in); got != tc.f16 {
			t.Errorf("%s: Float32ToFloat16(%g) = %#04x, want %#04x", tc.name, tc.in, got, tc.f16)
		}
		if got := tensor.Float32ToBFloat16(tc.in); got != tc.b16 {
			t.Errorf("%s: Float32ToBFloat16(%g) = %#04x, want %#04x", tc.name, tc.in, got, tc.b16)
		}
	}
}
