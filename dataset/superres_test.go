package dataset

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/headroom-ml/headroom/safetensors"
	"github.com/headroom-ml/headroom/tensor"
)

func readBicubic(t *testing.T) map[string]*tensor.Tensor {
	t.Helper()
	f, err := safetensors.ReadFile(filepath.Join("testdata", "bicubic.safetensors"))
	if err != nil {
		t.Fatalf("%v (regenerate with /usr/bin/python3 scripts/reference/bicubic_ref.py)", err)
	}
	out := map[string]*tensor.Tensor{}
	for _, n := range f.Names() {
		if out[n], err = f.Tensor(n); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// BicubicDown equals PyTorch's interpolate(mode="bicubic", antialias=True)
// by 2 and 4, and PIL's Image.resize(BICUBIC) on 8-bit pixels to within
// one level (PIL sums in fixed point).
func TestBicubicDownReference(t *testing.T) {
	ref := readBicubic(t)
	x := ref["x"]
	for _, f := range []int{2, 4} {
		want := ref[map[int]string{2: "down2", 4: "down4"}[f]]
		tr := BicubicDown{Factor: f}
		shape, err := tr.OutShape(x.Shape)
		if err != nil {
			t.Fatal(err)
		}
		if !tensor.Shape(shape).Equal(want.Shape) {
			t.Fatalf("factor %d: shape %v, PyTorch %v", f, shape, want.Shape)
		}
		ex := &Example{Shape: append([]int(nil), x.Shape...), X: append([]float32(nil), x.F32()...)}
		var scratch []float32
		tr.Apply(nil, ex, &scratch)
		var d float64
		for i, v := range want.F32() {
			d = math.Max(d, math.Abs(float64(ex.X[i]-v)))
		}
		if d > 1e-6 {
			t.Errorf("factor %d: max difference %.3g from PyTorch", f, d)
		}
	}
	u8 := ref["x_u8"]
	pil := ref["pil_down4_u8"]
	src := make([]float32, len(u8.Data))
	for i, b := range u8.Data {
		src[i] = float32(b)
	}
	dst := make([]float32, len(pil.Data))
	BicubicDown{Factor: 4}.Down(src, 3, 24, 40, dst)
	for i, b := range pil.Data {
		v := math.Round(math.Min(255, math.Max(0, float64(dst[i]))))
		if math.Abs(v-float64(b)) > 1 {
			t.Fatalf("pixel %d: %v, PIL %d", i, v, b)
		}
	}
}

// The flips, the transpose and the downscale: the flips and the transpose
// are involutions, a transpose moves (y, x) to (x, y), and the downscale
// commutes with all three (so a low-resolution input can be made from the
// augmented crop), shapes are checked.
func TestSuperResTransforms(t *testing.T) {
	c, h, w := 2, 8, 8
	x := make([]float32, c*h*w)
	for i := range x {
		x[i] = float32(math.Sin(float64(i) * 0.7))
	}
	apply := func(tr Transform, in []float32, shape []int) ([]float32, []int) {
		ex := &Example{Shape: append([]int(nil), shape...), X: append([]float32(nil), in...)}
		var s []float32
		tr.Apply(&Rand{}, ex, &s)
		return ex.X, ex.Shape
	}
	eq := func(a, b []float32) bool {
		for i := range a {
			if math.Abs(float64(a[i]-b[i])) > 1e-6 {
				return false
			}
		}
		return len(a) == len(b)
	}
	shape := []int{c, h, w}
	for _, tr := range []Transform{VerticalFlip{P: 1}, HorizontalFlip{P: 1}, Transpose{P: 1}} {
		once, _ := apply(tr, x, shape)
		twice, _ := apply(tr, once, shape)
		if eq(once, x) || !eq(twice, x) {
			t.Errorf("%T is not an involution that moves pixels", tr)
		}
		down := BicubicDown{Factor: 2}
		a, _ := apply(down, once, shape)
		d, ds := apply(down, x, shape)
		b, _ := apply(tr, d, ds)
		if !eq(a, b) {
			t.Errorf("%T does not commute with BicubicDown", tr)
		}
	}
	tx, _ := apply(Transpose{P: 1}, x, shape)
	if tx[1*h*w+2*w+5] != x[1*h*w+5*w+2] {
		t.Error("Transpose does not move (5, 2) to (2, 5)")
	}
	vf, _ := apply(VerticalFlip{P: 1}, x, shape)
	if vf[0*w+3] != x[(h-1)*w+3] {
		t.Error("VerticalFlip does not move the last row first")
	}
	for _, c := range []struct {
		tr Transform
		in []int
	}{{Transpose{}, []int{3, 4, 6}}, {BicubicDown{Factor: 4}, []int{3, 8, 6}}, {BicubicDown{}, []int{3, 8, 8}}, {VerticalFlip{}, []int{8, 8}}} {
		if _, err := c.tr.OutShape(c.in); err == nil {
			t.Errorf("%T accepted %v", c.tr, c.in)
		}
	}
}

// TestBicubicUp checks the enlarging resize: constants stay constant (the
// weights are normalized, the borders included) and, away from the
// borders, a linear ramp is reproduced at each output pixel's centre,
// (o+0.5)/f - 0.5 in input pixels (the cubic kernel reproduces linear
// functions; a shifted or wrongly scaled grid would not).
func TestBicubicUp(t *testing.T) {
	for _, f := range []int{2, 4} {
		const h, w = 6, 9
		src := make([]float32, 2*h*w)
		for y := range h {
			for x := range w {
				src[y*w+x] = 0.25           // channel 0: constant
				src[h*w+y*w+x] = float32(x) // channel 1: ramp along x
			}
		}
		dst := make([]float32, 2*h*f*w*f)
		BicubicUp{Factor: f}.Up(src, 2, h, w, dst)
		W := w * f
		for y := range h * f {
			for x := range W {
				if d := math.Abs(float64(dst[y*W+x]) - 0.25); d > 1e-6 {
					t.Fatalf("f=%d: constant at (%d,%d) = %v", f, y, x, dst[y*W+x])
				}
				if x < 2*f || x >= W-2*f {
					continue // the kernel reaches past the border
				}
				want := (float64(x)+0.5)/float64(f) - 0.5
				if d := math.Abs(float64(dst[h*f*W+y*W+x]) - want); d > 1e-5 {
					t.Fatalf("f=%d: ramp at x=%d = %v, want %v", f, x, dst[h*f*W+y*W+x], want)
				}
			}
		}
	}
}
