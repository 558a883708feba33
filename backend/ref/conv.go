package ref

import (
	"fmt"
	"math"

	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// convTaps calls f for every product of a 2-D convolution with geometry g:
// output element yi, input element xi and weight element wi.
func convTaps(g prim.ConvGeom, f func(yi, xi, wi int)) {
	kg := g.K / g.Groups // output channels per group
	cg := g.C / g.Groups // input channels per group
	for n := 0; n < g.N; n++ {
		for k := 0; k < g.K; k++ {
			grp := k / kg
			for oh := 0; oh < g.OH; oh++ {
				for ow := 0; ow < g.OW; ow++ {
					yi := ((n*g.K+k)*g.OH+oh)*g.OW + ow
					for c := 0; c < cg; c++ {
						ci := grp*cg + c
						for kh := 0; kh < g.KH; kh++ {
							ih := oh*g.SH - g.PH + kh*g.DH
							if ih < 0 || ih >= g.H {
								continue
							}
							for kw := 0; kw < g.KW; kw++ {
								iw := ow*g.SW - g.PW + kw*g.DW
								if iw < 0 || iw >= g.W {
									continue
								}
								f(yi, ((n*g.C+ci)*g.H+ih)*g.W+iw, ((k*cg+c)*g.KH+kh)*g.KW+kw)
							}
						}
					}
				}
			}
		}
	}
}

// conv2d is y = x * w (+ bias): inputs x, w and optionally bias.
func conv2d(n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	g, err := prim.ConvGeometry(in[0].Shape, in[1].Shape, n.Op.(*prim.Conv2dOp).Opts)
	if err != nil {
		return err
	}
	x, w := values(in[0]), values(in[1])
	y := make([]float64, out[0].Shape.NumElements())
	convTaps(g, func(yi, xi, wi int) { y[yi] += x[xi] * w[wi] })
	if len(in) == 3 {
		b := values(in[2])
		plane := g.OH * g.OW
		for i := range y {
			y[i] += b[(i/plane)%g.K]
		}
	}
	store(out[0], y)
	return nil
}

// conv2dBackwardInput is dx from inputs dy and w.
func conv2dBackwardInput(n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	g, err := n.Op.(*prim.Conv2dBackwardInput).Geom(in[1].Shape)
	if err != nil {
		return err
	}
	gy, w := values(in[0]), values(in[1])
	gx := make([]float64, out[0].Shape.NumElements())
	convTaps(g, func(yi, xi, wi int) { gx[xi] += gy[yi] * w[wi] })
	store(out[0], gx)
	return nil
}

// conv2dBackwardWeight is dw from inputs dy and x.
func conv2dBackwardWeight(n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	g, err := n.Op.(*prim.Conv2dBackwardWeight).Geom(in[1].Shape)
	if err != nil {
		return err
	}
	gy, x := values(in[0]), values(in[1])
	gw := make([]float64, out[0].Shape.NumElements())
	convTaps(g, func(yi, xi, wi int) { gw[wi] += gy[yi] * x[xi] })
	store(out[0], gw)
	return nil
}

// maxPool2d writes the maxima (output 0) and their indices in the input
// plane, ih*W + iw (output 1), as max_pool2d_with_indices: the first
// maximum of a window, a NaN winning.
func maxPool2d(n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	g, err := n.Op.(*prim.MaxPool2dOp).Geom(in[0].Shape)
	if err != nil {
		return err
	}
	x := values(in[0])
	y := make([]float64, out[0].Shape.NumElements())
	idx := out[1].I64()
	for p := 0; p < g.N*g.C; p++ {
		for oh := 0; oh < g.OH; oh++ {
			for ow := 0; ow < g.OW; ow++ {
				best, at := math.Inf(-1), -1
				for kh := 0; kh < g.KH; kh++ {
					ih := oh*g.SH - g.PH + kh*g.DH
					if ih < 0 || ih >= g.H {
						continue
					}
					for kw := 0; kw < g.KW; kw++ {
						iw := ow*g.SW - g.PW + kw*g.DW
						if iw < 0 || iw >= g.W {
							continue
						}
						v := x[p*g.H*g.W+ih*g.W+iw]
						if at < 0 || v > best || (v != v && best == best) {
							best, at = v, ih*g.W+iw
						}
					}
				}
				o := (p*g.OH+oh)*g.OW + ow
				y[o], idx[o] = best, int64(at)
			}
		}
	}
	store(out[0], y)
	return nil
}

// maxPool2dBackward routes each output gradient to its maximum's place.
func maxPool2dBackward(n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	gy, idx := values(in[0]), in[1].I64()
	s := out[0].Shape
	inPlane, outPlane := s[2]*s[3], in[0].Shape[2]*in[0].Shape[3]
	gx := make([]float64, s.NumElements())
	for o, v := range gy {
		i := idx[o]
		if i < 0 || i >= int64(inPlane) {
			return fmt.Errorf("ref: max_pool2d_backward: index %d outside a %d-element plane", i, inPlane)
		}
		gx[(o/outPlane)*inPlane+int(i)] += v
	}
	store(out[0], gx)
	return nil
}

// ceLayout is the logits as [outer, classes, inner].
func ceLayout(s tensor.Shape) (outer, classes, inner int) {
	if len(s) == 1 {
		return 1, s[0], 1
	}
	inner = 1
	for _, d := range s[2:] {
		inner *= d
	}
	return s[0], s[1], inner
}

func ceTargets(t []int64, classes int, ignore int64) (count int, err error) {
	for _, v := range t {
		if v == ignore {
			continue
		}
		if v < 0 || v >= int64(classes) {
			return 0, fmt.Errorf("ref: target %d is out of bounds for %d classes", v, classes)
		}
		count++
	}
	return count, nil
}

// crossEntropy is prim.CrossEntropyOp: the loss and each position's
// logsumexp.
func crossEntropy(n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	o := n.Op.(*prim.CrossEntropyOp)
	x, tgt := values(in[0]), in[1].I64()
	outer, classes, inner := ceLayout(in[0].Shape)
	count, err := ceTargets(tgt, classes, o.IgnoreIndex)
	if err != nil {
		return err
	}
	npos := outer * inner
	loss := make([]float64, npos)
	lse := make([]float64, npos)
	for p := 0; p < npos; p++ {
		base := (p/inner)*classes*inner + p%inner
		m, sum := math.Inf(-1), 0.0
		for c := 0; c < classes; c++ {
			m = math.Max(m, x[base+c*inner])
		}
		for c := 0; c < classes; c++ {
			sum += math.Exp(x[base+c*inner] - m)
		}
		lse[p] = m + math.Log(sum)
		t := tgt[p]
		if t == o.IgnoreIndex {
			continue
		}
		// -log p_t, and with label smoothing the mean of -log p_c.
		nll := lse[p] - x[base+int(t)*inner]
		var smooth float64
		for c := 0; c < classes; c++ {
			smooth += lse[p] - x[base+c*inner]
		}
		ls := o.LabelSmoothing
		loss[p] = (1-ls)*nll + ls/float64(classes)*smooth
	}
	store(out[1], lse)
	switch o.Reduction {
	case prim.ReductionNone:
		store(out[0], loss)
	default:
		var total float64
		for _, l := range loss {
			total += l
		}
		if o.Reduction == prim.ReductionMean {
			total /= float64(count)
		}
		store(out[0], []float64{total})
	}
	return nil
}

// crossEntropyBackward is prim.CrossEntropyBackward: inputs dloss, logits,
// targets and logsumexp.
func crossEntropyBackward(n *trace.Node, in, out []*tensor.Tensor, _ []byte) error {
	o := n.Op.(*prim.CrossEntropyBackward)
	gy, x, tgt, lse := values(in[0]), values(in[1]), in[2].I64(), values(in[3])
	outer, classes, inner := ceLayout(in[1].Shape)
	count, err := ceTargets(tgt, classes, o.IgnoreIndex)
	if err != nil {
		return err
	}
	ls := o.LabelSmoothing
	gx := make([]float64, len(x))
	for p := 0; p < outer*inner; p++ {
		t := tgt[p]
		if t == o.IgnoreIndex {
			continue
		}
		var w float64
		switch o.Reduction {
		case prim.ReductionNone:
			w = gy[p]
		case prim.ReductionSum:
			w = gy[0]
		default:
			w = gy[0] / float64(count)
		}
		base := (p/inner)*classes*inner + p%inner
		for c := 0; c < classes; c++ {
			target := ls / float64(classes)
			if c == int(t) {
				target += 1 - ls
			}
			gx[base+c*inner] = w * (math.Exp(x[base+c*inner]-lse[p]) - target)
		}
	}
	store(out[0], gx)
	return nil
}
