package dataset

import (
	"image"
	"image/color"
	"testing"
)

// The YCbCr fast path gives what the generic conversion (color.YCbCrToRGB
// through At) gives, for every subsample ratio and a sub-image that starts
// at odd coordinates.
func TestYCbCrToCHW(t *testing.T) {
	for _, r := range []image.YCbCrSubsampleRatio{image.YCbCrSubsampleRatio444, image.YCbCrSubsampleRatio422, image.YCbCrSubsampleRatio420,
		image.YCbCrSubsampleRatio440, image.YCbCrSubsampleRatio411, image.YCbCrSubsampleRatio410} {
		full := image.NewYCbCr(image.Rect(0, 0, 23, 17), r)
		for i := range full.Y {
			full.Y[i] = uint8(i * 31)
		}
		for i := range full.Cb {
			full.Cb[i], full.Cr[i] = uint8(i*17+5), uint8(255-i*13)
		}
		for _, img := range []*image.YCbCr{full, full.SubImage(image.Rect(3, 5, 20, 16)).(*image.YCbCr)} {
			b := img.Bounds()
			got := make([]float32, 3*b.Dx()*b.Dy())
			toCHW(img, 3, got)
			plane := b.Dx() * b.Dy()
			for y := range b.Dy() {
				for x := range b.Dx() {
					c := img.YCbCrAt(b.Min.X+x, b.Min.Y+y)
					rr, gg, bb := color.YCbCrToRGB(c.Y, c.Cb, c.Cr)
					i := y*b.Dx() + x
					if got[i] != lut8[rr] || got[plane+i] != lut8[gg] || got[2*plane+i] != lut8[bb] {
						t.Fatalf("%v %v: pixel (%d,%d) = %v %v %v, want %d %d %d", r, b, x, y, got[i], got[plane+i], got[2*plane+i], rr, gg, bb)
					}
				}
			}
		}
	}
}
