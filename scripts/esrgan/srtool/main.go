// Command srtool makes and scores the pictures of docs/esrgan.md's
// quality section: a photo's 4× bicubic downscale as an 8-bit PNG (the
// upscaler's input), the PSNR of an upscaled image and of bicubic
// upsampling against the photo (BasicSR's calculate_psnr: 8-bit images,
// 4 border pixels cropped, Y of BT.601 and RGB), side-by-side crops, and
// the largest difference between two float outputs of headroom upscale,
// and a photo as headroom decodes it (for comparison with PIL's decode).
//
//	go run ./scripts/esrgan/srtool lr PHOTO LR.png
//	go run ./scripts/esrgan/srtool psnr PHOTO LR.png SR.png
//	go run ./scripts/esrgan/srtool crop PHOTO LR.png SR.png X Y SIZE OUT.png
//	go run ./scripts/esrgan/srtool diff A.safetensors B.safetensors
//	go run ./scripts/esrgan/srtool decode PHOTO OUT.png
package main

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"strconv"

	"github.com/headroom-ml/headroom/dataset"
	"github.com/headroom-ml/headroom/gan"
	"github.com/headroom-ml/headroom/safetensors"
)

// img is [3, h, w] in [0, 1].
type img struct {
	v    []float32
	h, w int
}

func read(path string) img {
	data, err := os.ReadFile(path)
	check(err)
	v, h, w, err := dataset.DecodeImage(data, path, 3, nil)
	check(err)
	return img{v, h, w}
}

func write(path string, m img) {
	out := image.NewNRGBA(image.Rect(0, 0, m.w, m.h))
	q := func(f float32) uint8 { return uint8(math.Round(float64(min(max(f, 0), 1)) * 255)) }
	for y := range m.h {
		for x := range m.w {
			p := y*m.w + x
			out.SetNRGBA(x, y, color.NRGBA{q(m.v[p]), q(m.v[m.h*m.w+p]), q(m.v[2*m.h*m.w+p]), 255})
		}
	}
	f, err := os.Create(path)
	check(err)
	check(png.Encode(f, out))
	check(f.Close())
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "srtool:", err)
		os.Exit(1)
	}
}

// gt is the photo cut to multiples of 4 (from the top left), as the LR
// image is made from it.
func gt(path string) img {
	m := read(path)
	h, w := m.h/4*4, m.w/4*4
	return sub(m, 0, 0, h, w)
}

func sub(m img, y0, x0, h, w int) img {
	out := img{make([]float32, 3*h*w), h, w}
	for c := range 3 {
		for y := range h {
			copy(out.v[(c*h+y)*w:][:w], m.v[(c*m.h+y0+y)*m.w+x0:][:w])
		}
	}
	return out
}

func bicubic(lr img) img {
	up := img{make([]float32, 3*16*lr.h*lr.w), 4 * lr.h, 4 * lr.w}
	dataset.BicubicUp{Factor: 4}.Up(lr.v, 3, lr.h, lr.w, up.v)
	gan.Quantize(up.v)
	return up
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	check(err)
	return n
}

func main() {
	a := os.Args[1:]
	if len(a) == 0 {
		check(fmt.Errorf("usage: srtool lr|psnr|crop|diff|decode ... (see the source)"))
	}
	switch {
	case a[0] == "lr" && len(a) == 3:
		g := gt(a[1])
		lr := img{make([]float32, 3*g.h*g.w/16), g.h / 4, g.w / 4}
		dataset.BicubicDown{Factor: 4}.Down(g.v, 3, g.h, g.w, lr.v)
		write(a[2], lr)
		fmt.Printf("%s: %d×%d → %s %d×%d\n", a[1], g.w, g.h, a[2], lr.w, lr.h)
	case a[0] == "decode" && len(a) == 3:
		// headroom's decode as an 8-bit PNG (exact: 8-bit values survive
		// the float round trip), for scripts/esrgan/color_check.py.
		write(a[2], read(a[1]))
	case a[0] == "psnr" && len(a) == 4:
		g, lr, sr := gt(a[1]), read(a[2]), read(a[3])
		if sr.h != g.h || sr.w != g.w || lr.h*4 != g.h {
			check(fmt.Errorf("sizes: photo %d×%d, lr %d×%d, sr %d×%d", g.w, g.h, lr.w, lr.h, sr.w, sr.h))
		}
		b := bicubic(lr)
		fmt.Printf("%s: PSNR Y %.3f dB (bicubic %.3f), RGB %.3f dB (bicubic %.3f); border 4\n", a[1],
			gan.PSNR(sr.v, g.v, g.h, g.w, 4, true), gan.PSNR(b.v, g.v, g.h, g.w, 4, true),
			gan.PSNR(sr.v, g.v, g.h, g.w, 4, false), gan.PSNR(b.v, g.v, g.h, g.w, 4, false))
		// A colour shift shows in the channels' mean errors and cancels
		// partly in Y.
		me := func(m img) (e [3]float64) {
			P, n := g.h*g.w, float64((g.h-8)*(g.w-8))
			for c := range 3 {
				for y := 4; y < g.h-4; y++ {
					for x := 4; x < g.w-4; x++ {
						e[c] += 255 * float64(m.v[c*P+y*g.w+x]-g.v[c*P+y*g.w+x]) / n
					}
				}
			}
			return e
		}
		s, bb := me(sr), me(b)
		fmt.Printf("%s: mean error R G B %+.3f %+.3f %+.3f levels (bicubic %+.3f %+.3f %+.3f)\n", a[1], s[0], s[1], s[2], bb[0], bb[1], bb[2])
	case a[0] == "crop" && len(a) == 8:
		// Four panels of SIZE px at (X, Y) of the photo, 4 px apart: the
		// LR input (nearest, ×4), bicubic, the model's, the photo.
		g, lr, sr := gt(a[1]), read(a[2]), read(a[3])
		x, y, s := atoi(a[4])/4*4, atoi(a[5])/4*4, atoi(a[6])/4*4
		l := sub(lr, y/4, x/4, s/4, s/4)
		near := img{make([]float32, 3*s*s), s, s}
		for c := range 3 {
			for yy := range s {
				for xx := range s {
					near.v[(c*s+yy)*s+xx] = l.v[(c*l.h+yy/4)*l.w+xx/4]
				}
			}
		}
		// Bicubic of the whole LR image (its borders as the whole's), then cut.
		panels := []img{near, sub(bicubic(lr), y, x, s, s), sub(sr, y, x, s, s), sub(g, y, x, s, s)}
		const gap = 4
		W := 4*s + 3*gap
		out := img{make([]float32, 3*s*W), s, W}
		for i := range out.v {
			out.v[i] = 1
		}
		for k, p := range panels {
			for c := range 3 {
				for yy := range s {
					copy(out.v[(c*s+yy)*W+k*(s+gap):][:s], p.v[(c*s+yy)*s:][:s])
				}
			}
		}
		write(a[7], out)
	case a[0] == "diff" && len(a) == 3:
		x, err := safetensors.Load(a[1])
		check(err)
		y, err := safetensors.Load(a[2])
		check(err)
		p, q := x["image"], y["image"]
		if p == nil || q == nil || !p.Shape.Equal(q.Shape) {
			check(fmt.Errorf("not two images of one shape"))
		}
		var worst float64
		for i, v := range p.F32() {
			worst = max(worst, math.Abs(float64(v)-float64(q.F32()[i])))
		}
		fmt.Printf("max |a - b| = %.3g over %d values\n", worst, len(p.F32()))
	default:
		check(fmt.Errorf("usage: srtool lr|psnr|crop|diff|decode ... (see the source)"))
	}
}
