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

// lut8 maps an 8-bit value v to float32(v)/255: a division, as
// torchvision's ToTensor computes it (a multiplication by 1/255 can differ
// in the last bit).
var lut8 = func() (l [256]float32) {
	for i := range l {
		l[i] = float32(i) / 255
	}
	return l
}()

// toCHW converts img to float32 CHW in [0,1]. The common concrete types
// (what image/png and image/jpeg return for ordinary files) take fast paths;
// the rest go through color.Model conversion.
func toCHW(img image.Image, channels int, out []float32) {
	b := img.Bounds()
	h, w := b.Dy(), b.Dx()
	plane := h * w
	switch m := img.(type) {
	case *image.Gray:
		for y := range h {
			row := m.Pix[y*m.Stride : y*m.Stride+w]
			for x, p := range row {
				v := lut8[p]
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
					out[i] = lut8[row[4*x]]
					out[plane+i] = lut8[row[4*x+1]]
					out[2*plane+i] = lut8[row[4*x+2]]
				}
			}
			return
		}
	case *image.RGBA:
		// What image/png returns for opaque RGB files. Opaque pixels are
		// the same premultiplied or not; others take the generic path.
		if channels == 3 {
			for y := range h {
				row := m.Pix[y*m.Stride : y*m.Stride+4*w]
				for x := range w {
					i := y*w + x
					if row[4*x+3] != 255 {
						genericPixel(m.At(b.Min.X+x, b.Min.Y+y), channels, out, i, plane)
						continue
					}
					out[i] = lut8[row[4*x]]
					out[plane+i] = lut8[row[4*x+1]]
					out[2*plane+i] = lut8[row[4*x+2]]
				}
			}
			return
		}
	case *image.YCbCr:
		if xs, ys, ok := chromaShift(m.SubsampleRatio); channels == 3 && ok {
			// JPEG's usual output, row by row: offsets as YOffset and
			// COffset compute them, colors as color.YCbCrToRGB does (bit
			// for bit), without a call per pixel.
			for y := range h {
				py := b.Min.Y + y
				y0 := (py-m.Rect.Min.Y)*m.YStride - m.Rect.Min.X
				c0 := ((py>>ys)-(m.Rect.Min.Y>>ys))*m.CStride - (m.Rect.Min.X >> xs)
				for x := range w {
					px := b.Min.X + x
					ci := c0 + px>>xs
					r, g, bb := ycbcrToRGB(m.Y[y0+px], m.Cb[ci], m.Cr[ci])
					i := y*w + x
					out[i] = lut8[r]
					out[plane+i] = lut8[g]
					out[2*plane+i] = lut8[bb]
				}
			}
			return
		}
	}
	for y := range h {
		for x := range w {
			genericPixel(img.At(b.Min.X+x, b.Min.Y+y), channels, out, y*w+x, plane)
		}
	}
}

// genericPixel converts one pixel of any color model: 16-bit
// non-premultiplied RGB, or 16-bit luma for one channel.
func genericPixel(px color.Color, channels int, out []float32, i, plane int) {
	if channels == 1 {
		g := color.Gray16Model.Convert(px).(color.Gray16)
		out[i] = float32(g.Y) / 65535
		return
	}
	n := color.NRGBA64Model.Convert(px).(color.NRGBA64)
	out[i] = float32(n.R) / 65535
	out[plane+i] = float32(n.G) / 65535
	out[2*plane+i] = float32(n.B) / 65535
}

// chromaShift is how many bits a pixel's x and y shift right to index the
// chroma planes of a subsample ratio.
func chromaShift(r image.YCbCrSubsampleRatio) (xs, ys int, ok bool) {
	switch r {
	case image.YCbCrSubsampleRatio444:
		return 0, 0, true
	case image.YCbCrSubsampleRatio422:
		return 1, 0, true
	case image.YCbCrSubsampleRatio420:
		return 1, 1, true
	case image.YCbCrSubsampleRatio440:
		return 0, 1, true
	case image.YCbCrSubsampleRatio411:
		return 2, 0, true
	case image.YCbCrSubsampleRatio410:
		return 2, 1, true
	}
	return 0, 0, false
}

// ycbcrToRGB is color.YCbCrToRGB, copied so that it inlines in the loop.
func ycbcrToRGB(y, cb, cr uint8) (uint8, uint8, uint8) {
	yy1 := int32(y) * 0x10101
	cb1 := int32(cb) - 128
	cr1 := int32(cr) - 128
	r := yy1 + 91881*cr1
	if uint32(r)&0xff000000 == 0 {
		r >>= 16
	} else {
		r = ^(r >> 31)
	}
	g := yy1 - 22554*cb1 - 46802*cr1
	if uint32(g)&0xff000000 == 0 {
		g >>= 16
	} else {
		g = ^(g >> 31)
	}
	b := yy1 + 116130*cb1
	if uint32(b)&0xff000000 == 0 {
		b >>= 16
	} else {
		b = ^(b >> 31)
	}
	return uint8(r), uint8(g), uint8(b)
}
