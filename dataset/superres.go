package dataset

import (
	"fmt"
	"math"
)

// Super-resolution augmentations (BasicSR's augment: horizontal flip,
// vertical flip and a transpose, each with probability 1/2, which together
// give the eight flips and 90° rotations) and the bicubic downscale that
// makes a low-resolution input from a high-resolution crop.

// VerticalFlip mirrors the image top to bottom with probability P (0 is
// taken as 0.5).
type VerticalFlip struct{ P float64 }

func (t VerticalFlip) OutShape(in []int) ([]int, error) {
	_, _, _, err := chw(in, "VerticalFlip")
	return in, err
}

func (t VerticalFlip) Apply(r *Rand, ex *Example, _ *[]float32) {
	if r.Float64() >= half(t.P) {
		return
	}
	c, h, w := ex.Shape[0], ex.Shape[1], ex.Shape[2]
	for ch := range c {
		p := ex.X[ch*h*w : (ch+1)*h*w]
		for i, j := 0, h-1; i < j; i, j = i+1, j-1 {
			a, b := p[i*w:(i+1)*w], p[j*w:(j+1)*w]
			for x := range a {
				a[x], b[x] = b[x], a[x]
			}
		}
	}
}

func half(p float64) float64 {
	if p == 0 {
		return 0.5
	}
	return p
}

// Transpose swaps height and width with probability P (0 is taken as
// 0.5): with the two flips, a rotation by a multiple of 90°. Square crops
// keep their shape; OutShape refuses others, whose shape would depend on
// the draw.
type Transpose struct{ P float64 }

func (t Transpose) OutShape(in []int) ([]int, error) {
	_, h, w, err := chw(in, "Transpose")
	if err == nil && h != w {
		err = fmt.Errorf("dataset: Transpose of a %dx%d image: the batch's shape would depend on the draw (crop a square first)", h, w)
	}
	return in, err
}

func (t Transpose) Apply(r *Rand, ex *Example, scratch *[]float32) {
	if r.Float64() >= half(t.P) {
		return
	}
	c, h, w := ex.Shape[0], ex.Shape[1], ex.Shape[2]
	out := grow(*scratch, c*h*w)
	for ch := range c {
		src, dst := ex.X[ch*h*w:(ch+1)*h*w], out[ch*h*w:(ch+1)*h*w]
		for y := range h {
			for x := range w {
				dst[x*h+y] = src[y*w+x]
			}
		}
	}
	*scratch, ex.X = ex.X, out
	ex.setShape(c, w, h)
}

// BicubicDown divides height and width by Factor with an antialiased
// bicubic filter (a = -0.5, support scaled by the factor): PIL's
// Image.resize(BICUBIC) and PyTorch's interpolate(mode="bicubic",
// antialias=True) on float images, the usual way low-resolution training
// inputs are made. Sizes must be multiples of Factor.
type BicubicDown struct{ Factor int }

func (t BicubicDown) OutShape(in []int) ([]int, error) {
	c, h, w, err := chw(in, "BicubicDown")
	if err != nil {
		return nil, err
	}
	if t.Factor < 1 || h%t.Factor != 0 || w%t.Factor != 0 {
		return nil, fmt.Errorf("dataset: BicubicDown by %d of a %dx%d image: sizes must be positive multiples of the factor", t.Factor, h, w)
	}
	return []int{c, h / t.Factor, w / t.Factor}, nil
}

// bicubicWeights are PIL's precomputed coefficients of an in -> out
// resampling: for each output index its first source index and weights
// (normalized to sum 1).
func bicubicWeights(in, out int) (first []int, weights [][]float64) {
	cubic := func(x float64) float64 {
		const a = -0.5
		x = math.Abs(x)
		switch {
		case x < 1:
			return ((a+2)*x-(a+3))*x*x + 1
		case x < 2:
			return (((x-5)*x+8)*x - 4) * a
		}
		return 0
	}
	scale := float64(in) / float64(out)
	fs := max(scale, 1)
	support := 2 * fs
	for o := range out {
		center := (float64(o) + 0.5) * scale
		lo := max(int(center-support+0.5), 0)
		hi := min(int(center+support+0.5), in)
		var ws []float64
		var sum float64
		for x := lo; x < hi; x++ {
			v := cubic((float64(x) - center + 0.5) / fs)
			ws = append(ws, v)
			sum += v
		}
		for i := range ws {
			ws[i] /= sum
		}
		first = append(first, lo)
		weights = append(weights, ws)
	}
	return first, weights
}

// Down resizes one [c, h, w] image into dst ([c, h/f, w/f]): rows first,
// then columns, in float64 sums.
func (t BicubicDown) Down(src []float32, c, h, w int, dst []float32) {
	resize(src, c, h, w, h/t.Factor, w/t.Factor, dst)
}

// resize is PIL's separable bicubic resampling of [c, h, w] to
// [c, oh, ow] (antialiased when shrinking): rows first, then columns.
func resize(src []float32, c, h, w, oh, ow int, dst []float32) {
	fx, wx := bicubicWeights(w, ow)
	fy, wy := bicubicWeights(h, oh)
	tmp := make([]float64, h*ow)
	for ch := range c {
		p := src[ch*h*w : (ch+1)*h*w]
		for y := range h {
			row := p[y*w : (y+1)*w]
			for o := range ow {
				var s float64
				for k, wt := range wx[o] {
					s += wt * float64(row[fx[o]+k])
				}
				tmp[y*ow+o] = s
			}
		}
		q := dst[ch*oh*ow : (ch+1)*oh*ow]
		for o := range oh {
			for x := range ow {
				var s float64
				for k, wt := range wy[o] {
					s += wt * tmp[(fy[o]+k)*ow+x]
				}
				q[o*ow+x] = float32(s)
			}
		}
	}
}

// BicubicUp multiplies height and width by Factor with the same bicubic
// kernel (a = -0.5; PIL's Image.resize(BICUBIC) when enlarging, which is
// MATLAB's imresize kernel): the baseline a super-resolution network has
// to beat.
type BicubicUp struct{ Factor int }

// Up resizes one [c, h, w] image into dst ([c, h*f, w*f]).
func (t BicubicUp) Up(src []float32, c, h, w int, dst []float32) {
	resize(src, c, h, w, h*t.Factor, w*t.Factor, dst)
}

func (t BicubicDown) Apply(_ *Rand, ex *Example, scratch *[]float32) {
	c, h, w := ex.Shape[0], ex.Shape[1], ex.Shape[2]
	out := grow(*scratch, c*(h/t.Factor)*(w/t.Factor))
	t.Down(ex.X, c, h, w, out)
	*scratch, ex.X = ex.X, out
	ex.setShape(c, h/t.Factor, w/t.Factor)
}
