package zoo

import (
	"fmt"
	"math"

	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// Synthetic is data generated for a model of the zoo when none is given:
// random, but learnable, so that a few hundred steps show the loss fall.
//
//   - Classifiers (images in, one label per image out): each image is
//     standard normal noise; its label is the argmax of a fixed random
//     linear teacher applied to the image average-pooled to 4x4 per
//     channel (a teacher on the full 3x224x224 input would be a
//     1000x150528 matrix; pooling keeps it a few KB and the task
//     learnable by a convolutional network).
//   - Language models (tokens in, next tokens out): each sequence starts
//     at a random token and follows next = (a*tok + b) mod V, with one
//     token in 8 replaced at random; the target is the sequence shifted
//     by one, as nanoGPT's batches.
//   - Image-to-image models (rrdbnet): the input is noise smoothed over
//     2x2 blocks, the target its nearest-neighbour upsampling.
//
// Sample i depends only on the seed and i, never on earlier samples, so a
// sampler's shuffled order and a resumed run see the same data.
type Synthetic struct {
	kind    int
	x, y    trace.Meta // of one sample (batch 1)
	classes int
	seed    uint64
	teacher []float32 // classes x (channels*16)
}

const (
	synthClassify = iota
	synthTokens
	synthImage
)

// OutputMeta traces s's forward pass for a batch of n (no data, nothing
// allocated) and returns its output's metadata: the number of classes of a
// classifier, the vocabulary of a language model.
func OutputMeta(s Spec, n int) (trace.Meta, error) {
	m := s.New(nn.NewStore().Root())
	x, _ := s.Example(n)
	g := trace.New()
	var out trace.Meta
	err := trace.Capture(func() { out = m.Forward(g.Input("x", x.DType, x.Shape)).Meta })
	return out, err
}

// NewSynthetic returns s's synthetic data, drawn from seed.
func NewSynthetic(s Spec, seed uint64) (*Synthetic, error) {
	x, y := s.Example(1)
	out, err := OutputMeta(s, 1)
	if err != nil {
		return nil, err
	}
	d := &Synthetic{x: x, y: y, seed: seed}
	switch {
	case x.DType == tensor.Float32 && len(x.Shape) == 4 && y.DType == tensor.Int64 && len(y.Shape) == 1 && len(out.Shape) == 2:
		d.kind, d.classes = synthClassify, out.Shape[1]
		feats := x.Shape[1] * 16
		d.teacher = make([]float32, d.classes*feats)
		st := seed ^ 0x7ea4e5
		for i := range d.teacher {
			d.teacher[i] = float32(normal(&st))
		}
	case x.DType == tensor.Int64 && len(x.Shape) == 2 && y.DType == tensor.Int64 && len(out.Shape) == 3:
		d.kind, d.classes = synthTokens, out.Shape[2]
	case x.DType == tensor.Float32 && len(x.Shape) == 4 && y.DType == tensor.Float32 && len(y.Shape) == 4 &&
		y.Shape[2]%x.Shape[2] == 0 && y.Shape[3]%x.Shape[3] == 0:
		d.kind = synthImage
	default:
		return nil, fmt.Errorf("zoo: no synthetic data for %s (inputs %v, targets %v)", s.Name, x, y)
	}
	return d, nil
}

// Classes is the number of classes (the vocabulary for a language model;
// 0 for image-to-image models).
func (d *Synthetic) Classes() int { return d.classes }

// Batch returns the samples idx as one batch of inputs and targets.
func (d *Synthetic) Batch(idx []int) (x, y *tensor.Tensor) {
	n := len(idx)
	xs, ys := d.x.Shape.Clone(), d.y.Shape.Clone()
	xs[0], ys[0] = n, n
	x, y = tensor.New(d.x.DType, xs), tensor.New(d.y.DType, ys)
	per, yper := xs.NumElements()/n, ys.NumElements()/n
	for b, i := range idx {
		st := d.seed ^ uint64(i)*0xD1B54A32D192ED03
		switch d.kind {
		case synthClassify:
			xv := x.F32()[b*per : (b+1)*per]
			for j := range xv {
				xv[j] = float32(normal(&st))
			}
			y.I64()[b] = int64(d.label(xv))
		case synthTokens:
			v := uint64(d.classes)
			xv, yv := x.I64()[b*per:(b+1)*per], y.I64()[b*yper:(b+1)*yper]
			tok := splitmix(&st) % v
			for j := 0; j <= per; j++ {
				if j < per {
					xv[j] = int64(tok)
				}
				if j > 0 {
					yv[j-1] = int64(tok)
				}
				tok = (tok*5 + 3) % v
				if splitmix(&st)%8 == 0 {
					tok = splitmix(&st) % v
				}
			}
		case synthImage:
			c, h, w := xs[1], xs[2], xs[3]
			fh, fw := ys[2]/h, ys[3]/w
			xv, yv := x.F32()[b*per:(b+1)*per], y.F32()[b*yper:(b+1)*yper]
			for ch := 0; ch < c; ch++ {
				for r := 0; r < h; r += 2 {
					for q := 0; q < w; q += 2 {
						v := float32(normal(&st)) * 0.5
						for dr := 0; dr < 2 && r+dr < h; dr++ {
							for dq := 0; dq < 2 && q+dq < w; dq++ {
								xv[(ch*h+r+dr)*w+q+dq] = v
							}
						}
					}
				}
				for r := 0; r < h*fh; r++ {
					for q := 0; q < w*fw; q++ {
						yv[(ch*h*fh+r)*w*fw+q] = xv[(ch*h+r/fh)*w+q/fw]
					}
				}
			}
		}
	}
	return x, y
}

// label is the teacher's class for one image (c x h x w).
func (d *Synthetic) label(img []float32) int {
	c, h, w := d.x.Shape[1], d.x.Shape[2], d.x.Shape[3]
	feats := make([]float32, c*16)
	for ch := 0; ch < c; ch++ {
		for r := 0; r < h; r++ {
			for q := 0; q < w; q++ {
				feats[ch*16+(r*4/h)*4+q*4/w] += img[(ch*h+r)*w+q]
			}
		}
	}
	best, bestV := 0, float32(math.Inf(-1))
	for k := 0; k < d.classes; k++ {
		var s float32
		row := d.teacher[k*len(feats) : (k+1)*len(feats)]
		for j, f := range feats {
			s += row[j] * f
		}
		if s > bestV {
			best, bestV = k, s
		}
	}
	return best
}

func splitmix(st *uint64) uint64 {
	*st += 0x9E3779B97F4A7C15
	z := *st
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// normal is a standard normal draw (Box-Muller), fixed forever so that
// synthetic data is the same on every platform and Go release.
func normal(st *uint64) float64 {
	u1 := (float64(splitmix(st)>>11) + 0.5) / (1 << 53)
	u2 := float64(splitmix(st)>>11) / (1 << 53)
	return math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
}
