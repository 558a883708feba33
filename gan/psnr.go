package gan

import "math"

// Quantize rounds v (in [0, 1], clamped) to 8-bit levels, in place, as
// BasicSR's tensor2img does before any metric: PSNR is of the images as
// saved.
func Quantize(v []float32) {
	for i, x := range v {
		v[i] = float32(math.Round(float64(min(max(x, 0), 1))*255)) / 255
	}
}

// PSNR is BasicSR's calculate_psnr of two [3, h, w] RGB images in [0, 1]
// (8-bit levels: see Quantize): border pixels cropped on each side, then
// 10·log10(255²/MSE) over the RGB values in [0, 255], or, with y, over
// the luma of BasicSR's rgb2ycbcr (ITU-R BT.601, 16..235: to_y_channel).
// Equal images give +Inf.
func PSNR(a, b []float32, h, w, border int, y bool) float64 {
	var sum float64
	var n int
	for r := border; r < h-border; r++ {
		for c := border; c < w-border; c++ {
			i := r*w + c
			if y {
				d := luma(a, i, h*w) - luma(b, i, h*w)
				sum += d * d
				n++
				continue
			}
			for ch := range 3 {
				d := 255 * (float64(a[ch*h*w+i]) - float64(b[ch*h*w+i]))
				sum += d * d
				n++
			}
		}
	}
	if sum == 0 {
		return math.Inf(1)
	}
	return 10 * math.Log10(255*255/(sum/float64(n)))
}

// luma is BasicSR's bgr2ycbcr(y_only=True) of pixel i, times 255.
func luma(v []float32, i, plane int) float64 {
	r, g, b := float64(v[i]), float64(v[plane+i]), float64(v[2*plane+i])
	return 65.481*r + 128.553*g + 24.966*b + 16
}
