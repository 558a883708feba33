package gan

import (
	"math"
	"testing"
)

// TestPSNR checks BasicSR's PSNR on hand-computed cases: the border crop
// (a difference only in the cropped border does not count), RGB over all
// three channels, Y through BT.601 luma, and Quantize's rounding.
func TestPSNR(t *testing.T) {
	const h, w = 6, 5
	img := func() []float32 { return make([]float32, 3*h*w) }
	a, b := img(), img()
	b[0] = 1 // red of the corner pixel: inside a border of 1
	if got := PSNR(a, b, h, w, 1, false); !math.IsInf(got, 1) {
		t.Errorf("a difference in the cropped border: PSNR %v, want +Inf", got)
	}
	// Red of pixel (2, 2) off by 10 levels: MSE over 4·3 pixels·3 channels.
	b[0] = 0
	b[2*w+2] = 10.0 / 255
	wantRGB := 10 * math.Log10(255*255/(100.0/36))
	if got := PSNR(a, b, h, w, 1, false); math.Abs(got-wantRGB) > 1e-5 {
		t.Errorf("RGB PSNR %v, want %v", got, wantRGB)
	}
	// Y: the red difference weighs 65.481/255 per level.
	d := 65.481 * 10.0 / 255
	wantY := 10 * math.Log10(255*255/(d*d/12))
	if got := PSNR(a, b, h, w, 1, true); math.Abs(got-wantY) > 1e-6 {
		t.Errorf("Y PSNR %v, want %v", got, wantY)
	}
	q := []float32{-0.1, 0.6 / 255, 0.49 / 255, 1.2, 100.4 / 255}
	Quantize(q)
	for i, want := range []float32{0, 1.0 / 255, 0, 1, 100.0 / 255} {
		if q[i] != want {
			t.Errorf("Quantize: [%d] = %v, want %v", i, q[i], want)
		}
	}
}
