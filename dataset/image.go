package dataset

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	_ "image/jpeg" // register the JPEG decoder for image.Decode
	_ "image/png"  // register the PNG decoder for image.Decode
)

// MaxImagePixels bounds width x height of a decoded image. A header that
// declares more is far more likely corrupt than a real training image, and
// decoding it would allocate gigabytes before failing.
const MaxImagePixels = 1 << 26

// DecodeImage decodes a PNG or JPEG image into dst as float32 in CHW layout
// [channels, height, width], each value scaled to [0,1] (ToTensor's
// convention), reusing dst's capacity. channels is 1 (grayscale, by the
// ITU-R 601 luma weights the standard library's color.GrayModel uses) or 3
// (RGB; alpha is dropped, colors are not premultiplied). name is used in
// errors only.
//
// The standard library's decoders allocate the decoded image on each call;
// that garbage, not dst, is the per-sample allocation of image sources.
func DecodeImage(data []byte, name string, channels int, dst []float32) (out []float32, h, w int, err error) {
	return decodeImage(data, name, channels, dst, MaxImagePixels)
}

// decodeImage is DecodeImage with the pixel bound a parameter (the fuzz
// test keeps it small).
func decodeImage(data []byte, name string, channels int, dst []float32, maxPixels int64) (out []float32, h, w int, err error) {
	if channels != 1 && channels != 3 {
		return dst, 0, 0, fmt.Errorf("dataset: %s: %d channels requested, want 1 or 3", name, channels)
	}
	cfg, _, err := image.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return dst, 0, 0, sampleErr(name, err)
	}
	if cfg.Width <= 0 || cfg.Height <= 0 || int64(cfg.Width)*int64(cfg.Height) > maxPixels {
		return dst, 0, 0, sampleErr(name, fmt.Errorf("image is %dx%d, outside 1..%d pixels", cfg.Width, cfg.Height, maxPixels))
	}
	img, _, err := image.Decode(bytes.NewReader(data))
	if err != nil {
		return dst, 0, 0, sampleErr(name, err)
	}
	b := img.Bounds()
	h, w = b.Dy(), b.Dx()
	out = grow(dst, channels*h*w)
	toCHW(img, channels, out)
	return out, h, w, nil
}

// toCHW converts img to float32 CHW in [0,1]. The common concrete types
// (what image/png and image/jpeg return for ordinary files) take fast paths;
// the rest go through color.Model conversion.
func toCHW(img image.Image, channels int, out []float32) {
	b := img.Bounds()
	h, w := b.Dy(), b.Dx()
	plane := h * w
	const s8 = 1.0 / 255
	switch m := img.(type) {
	case *image.Gray:
		for y := range h {
			row := m.Pix[y*m.Stride : y*m.Stride+w]
			for x, p := range row {
				v := float32(p) * s8
				for c := range channels {
					out[c*plane+y*w+x] = v
				}
			}
		}
		return
	case *image.NRGBA:
		if channels == 3 {
			for y := range h {
				row := m.Pix[y*m.Stride : y*m.Stride+4*w]
				for x := range w {
					i := y*w + x
					out[i] = float32(row[4*x]) * s8
					out[plane+i] = float32(row[4*x+1]) * s8
					out[2*plane+i] = float32(row[4*x+2]) * s8
				}
			}
			return
		}
	case *image.YCbCr:
		if channels == 3 {
			for y := range h {
				for x := range w {
					yi := m.YOffset(b.Min.X+x, b.Min.Y+y)
					ci := m.COffset(b.Min.X+x, b.Min.Y+y)
					r, g, bb := color.YCbCrToRGB(m.Y[yi], m.Cb[ci], m.Cr[ci])
					i := y*w + x
					out[i] = float32(r) * s8
					out[plane+i] = float32(g) * s8
					out[2*plane+i] = float32(bb) * s8
				}
			}
			return
		}
	}
	const s16 = 1.0 / 65535
	for y := range h {
		for x := range w {
			i := y*w + x
			px := img.At(b.Min.X+x, b.Min.Y+y)
			if channels == 1 {
				g := color.Gray16Model.Convert(px).(color.Gray16)
				out[i] = float32(g.Y) * s16
				continue
			}
			n := color.NRGBA64Model.Convert(px).(color.NRGBA64)
			out[i] = float32(n.R) * s16
			out[plane+i] = float32(n.G) * s16
			out[2*plane+i] = float32(n.B) * s16
		}
	}
}
