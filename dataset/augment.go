package dataset

import (
	"fmt"
	"math"
)

// Transform changes a decoded Example: an augmentation or a normalization.
// The loader applies a list of them in order, in its workers, with a
// generator seeded by (seed, epoch, sample) so that the result does not
// depend on which worker runs it or when.
type Transform interface {
	// OutShape is the shape Apply produces from an input of shape in, or an
	// error when the transform does not apply to it.
	OutShape(in []int) ([]int, error)
	// Apply transforms ex.X in place or through scratch (swapping the two
	// slices), drawing any randomness from r.
	Apply(r *Rand, ex *Example, scratch *[]float32)
}

// Rand is the generator transforms draw from: splitmix64, implemented here
// so that augmentations are the same on every platform and Go release.
type Rand struct{ s uint64 }

// sampleRand seeds a generator for one sample of one epoch.
func sampleRand(seed uint64, epoch, id int) Rand {
	st := seed ^ uint64(epoch)*0xD1B54A32D192ED03
	st = splitmix64(&st) ^ uint64(id)*0x9E3779B97F4A7C15
	return Rand{s: splitmix64(&st)}
}

// Uint64 returns the next value.
func (r *Rand) Uint64() uint64 { return splitmix64(&r.s) }

// Intn returns a uniform value in [0, n); n must be positive.
func (r *Rand) Intn(n int) int { return int(bounded(&r.s, uint64(n))) }

// Float64 returns a uniform value in [0, 1).
func (r *Rand) Float64() float64 { return float64(r.Uint64()>>11) * (1.0 / (1 << 53)) }

// chw checks that a shape is an image's.
func chw(in []int, what string) (c, h, w int, err error) {
	if len(in) != 3 {
		return 0, 0, 0, fmt.Errorf("dataset: %s needs a [C H W] image, got shape %v", what, in)
	}
	return in[0], in[1], in[2], nil
}

// RandomCrop pads the image with Padding zeros on every side and crops a
// Height x Width window at a uniformly random position (torchvision's
// RandomCrop(size, padding) with fill 0).
type RandomCrop struct {
	Height, Width int
	Padding       int
}

func (t RandomCrop) OutShape(in []int) ([]int, error) {
	c, h, w, err := chw(in, "RandomCrop")
	if err != nil {
		return nil, err
	}
	if t.Height <= 0 || t.Width <= 0 || t.Padding < 0 || h+2*t.Padding < t.Height || w+2*t.Padding < t.Width {
		return nil, fmt.Errorf("dataset: RandomCrop %dx%d with padding %d does not fit a %dx%d image", t.Height, t.Width, t.Padding, h, w)
	}
	return []int{c, t.Height, t.Width}, nil
}

func (t RandomCrop) Apply(r *Rand, ex *Example, scratch *[]float32) {
	c, h, w := ex.Shape[0], ex.Shape[1], ex.Shape[2]
	p := t.Padding
	top := r.Intn(h+2*p-t.Height+1) - p
	left := r.Intn(w+2*p-t.Width+1) - p
	out := grow(*scratch, c*t.Height*t.Width)
	for ch := range c {
		src := ex.X[ch*h*w : (ch+1)*h*w]
		dst := out[ch*t.Height*t.Width : (ch+1)*t.Height*t.Width]
		for y := range t.Height {
			row := dst[y*t.Width : (y+1)*t.Width]
			sy := top + y
			if sy < 0 || sy >= h {
				clear(row)
				continue
			}
			for x := range row {
				sx := left + x
				if sx < 0 || sx >= w {
					row[x] = 0
				} else {
					row[x] = src[sy*w+sx]
				}
			}
		}
	}
	*scratch, ex.X = ex.X, out
	ex.setShape(c, t.Height, t.Width)
}

// HorizontalFlip mirrors the image left to right with probability P
// (torchvision's RandomHorizontalFlip; P 0 is taken as 0.5).
type HorizontalFlip struct{ P float64 }

func (t HorizontalFlip) OutShape(in []int) ([]int, error) {
	_, _, _, err := chw(in, "HorizontalFlip")
	return in, err
}

func (t HorizontalFlip) Apply(r *Rand, ex *Example, _ *[]float32) {
	p := t.P
	if p == 0 {
		p = 0.5
	}
	if r.Float64() >= p {
		return
	}
	c, h, w := ex.Shape[0], ex.Shape[1], ex.Shape[2]
	for row := range c * h {
		s := ex.X[row*w : (row+1)*w]
		for i, j := 0, w-1; i < j; i, j = i+1, j-1 {
			s[i], s[j] = s[j], s[i]
		}
	}
}

// Resize scales the image to Height x Width by bilinear interpolation with
// half-pixel centres (PyTorch's interpolate(mode="bilinear",
// align_corners=False), without antialiasing).
type Resize struct{ Height, Width int }

func (t Resize) OutShape(in []int) ([]int, error) {
	c, _, _, err := chw(in, "Resize")
	if err != nil {
		return nil, err
	}
	if t.Height <= 0 || t.Width <= 0 {
		return nil, fmt.Errorf("dataset: Resize to %dx%d", t.Height, t.Width)
	}
	return []int{c, t.Height, t.Width}, nil
}

// source maps an output coordinate to the two input coordinates and the
// weight of the second, as PyTorch's area_pixel_compute_source_index does.
func bilinearSource(o, in, out int) (i0, i1 int, l float32) {
	s := float32((float64(o)+0.5)*float64(in)/float64(out) - 0.5)
	if s < 0 {
		s = 0
	}
	i0 = int(s)
	if i0 > in-1 {
		i0 = in - 1
	}
	i1 = min(i0+1, in-1)
	return i0, i1, s - float32(i0)
}

func (t Resize) Apply(_ *Rand, ex *Example, scratch *[]float32) {
	c, h, w := ex.Shape[0], ex.Shape[1], ex.Shape[2]
	H, W := t.Height, t.Width
	if h == H && w == W {
		return
	}
	out := grow(*scratch, c*H*W)
	for ch := range c {
		src := ex.X[ch*h*w : (ch+1)*h*w]
		dst := out[ch*H*W : (ch+1)*H*W]
		for y := range H {
			y0, y1, ly := bilinearSource(y, h, H)
			r0, r1 := src[y0*w:(y0+1)*w], src[y1*w:(y1+1)*w]
			for x := range W {
				x0, x1, lx := bilinearSource(x, w, W)
				top := r0[x0]*(1-lx) + r0[x1]*lx
				bot := r1[x0]*(1-lx) + r1[x1]*lx
				dst[y*W+x] = top*(1-ly) + bot*ly
			}
		}
	}
	*scratch, ex.X = ex.X, out
	ex.setShape(c, H, W)
}

// Normalize maps each value x of channel c (the first dimension) to
// (x - Mean[c]) / Std[c], in float32 as torchvision's Normalize computes
// it. A single Mean and Std apply to every channel.
type Normalize struct{ Mean, Std []float32 }

func (t Normalize) OutShape(in []int) ([]int, error) {
	if len(in) == 0 {
		return nil, fmt.Errorf("dataset: Normalize of a scalar")
	}
	if len(t.Mean) != len(t.Std) || (len(t.Mean) != 1 && len(t.Mean) != in[0]) {
		return nil, fmt.Errorf("dataset: Normalize with %d means and %d stds for %d channels", len(t.Mean), len(t.Std), in[0])
	}
	for _, s := range t.Std {
		if s == 0 || math.IsNaN(float64(s)) {
			return nil, fmt.Errorf("dataset: Normalize with std %v", s)
		}
	}
	return in, nil
}

func (t Normalize) Apply(_ *Rand, ex *Example, _ *[]float32) {
	c := ex.Shape[0]
	plane := len(ex.X) / c
	for ch := range c {
		k := 0
		if len(t.Mean) > 1 {
			k = ch
		}
		m, s := t.Mean[k], t.Std[k]
		for i, v := range ex.X[ch*plane : (ch+1)*plane] {
			ex.X[ch*plane+i] = (v - m) / s
		}
	}
}

// outShape runs a shape through a list of transforms.
func outShape(in []int, ts []Transform) ([]int, error) {
	s := in
	for _, t := range ts {
		var err error
		if s, err = t.OutShape(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}
