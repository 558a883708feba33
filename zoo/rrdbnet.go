package zoo

import (
	"fmt"
	"strconv"

	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/trace"
)

// RRDBNetConfig is the constructor of ESRGAN's RRDBNet(in_nc, out_nc, nf,
// nb, gc).
type RRDBNetConfig struct {
	InNC, OutNC int // image channels in and out
	NF          int // features in the trunk
	NB          int // RRDB blocks
	GC          int // growth channels of the dense blocks
}

// DefaultRRDBNetConfig is ESRGAN's generator: in_nc 3, out_nc 3, nf 64,
// nb 23, gc 32 (16,697,987 parameters).
func DefaultRRDBNetConfig() RRDBNetConfig {
	return RRDBNetConfig{InNC: 3, OutNC: 3, NF: 64, NB: 23, GC: 32}
}

// RRDBNet is the ESRGAN generator of xinntao's RRDBNet_arch.py, with its
// parameter names (conv_first, RRDB_trunk.{i}.RDB{1,2,3}.conv{1..5},
// trunk_conv, upconv1, upconv2, HRconv, conv_last), LeakyReLU(0.2),
// residual scaling 0.2 and two nearest x2 upsamplings: images [N, in_nc,
// H, W] become [N, out_nc, 4H, 4W]. All convolutions are 3x3, padding 1,
// with bias, and keep PyTorch's default initialization (the reference
// leaves its scaled initialization commented out).
type RRDBNet struct {
	nn.Module
	Config                              RRDBNetConfig
	ConvFirst                           *nn.Conv2d
	Trunk                               []*RRDB
	TrunkConv, UpConv1, UpConv2, HRConv *nn.Conv2d
	ConvLast                            *nn.Conv2d
	// Checkpoint records each RRDB block in a checkpoint region
	// (nn.Checkpoint), recomputed in the backward pass under the Regions
	// recomputation policy and kept under the others.
	Checkpoint bool
}

// RRDB is a residual-in-residual dense block: three dense blocks, then
// out*0.2 + x.
type RRDB struct {
	nn.Module
	RDB [3]*ResidualDenseBlock
}

// ResidualDenseBlock is ResidualDenseBlock_5C: five densely connected 3x3
// convolutions, then x5*0.2 + x.
type ResidualDenseBlock struct {
	nn.Module
	Conv [5]*nn.Conv2d
}

func conv3x3(b nn.Builder, in, out int) *nn.Conv2d {
	return nn.NewConv2d(b, in, out, 3, op.ConvOpts{Padding: [2]int{1, 1}}, true)
}

// NewRRDBNet registers an RRDBNet's parameters under b. It panics on a
// config with a non-positive size.
func NewRRDBNet(b nn.Builder, cfg RRDBNetConfig) *RRDBNet {
	if cfg.InNC <= 0 || cfg.OutNC <= 0 || cfg.NF <= 0 || cfg.NB < 0 || cfg.GC <= 0 {
		panic(fmt.Sprintf("zoo: invalid RRDBNet config %+v", cfg))
	}
	m := &RRDBNet{Module: nn.NewModule(b), Config: cfg}
	nf, gc := cfg.NF, cfg.GC
	m.ConvFirst = conv3x3(b.Sub("conv_first"), cfg.InNC, nf)
	tb := b.Sub("RRDB_trunk")
	for i := range cfg.NB {
		rb := tb.Sub(strconv.Itoa(i))
		r := &RRDB{Module: nn.NewModule(rb)}
		for j := range 3 {
			db := rb.Sub("RDB" + strconv.Itoa(j+1))
			d := &ResidualDenseBlock{Module: nn.NewModule(db)}
			for k := range 4 {
				d.Conv[k] = conv3x3(db.Sub("conv"+strconv.Itoa(k+1)), nf+k*gc, gc)
			}
			d.Conv[4] = conv3x3(db.Sub("conv5"), nf+4*gc, nf)
			r.RDB[j] = d
		}
		m.Trunk = append(m.Trunk, r)
	}
	m.TrunkConv = conv3x3(b.Sub("trunk_conv"), nf, nf)
	m.UpConv1 = conv3x3(b.Sub("upconv1"), nf, nf)
	m.UpConv2 = conv3x3(b.Sub("upconv2"), nf, nf)
	m.HRConv = conv3x3(b.Sub("HRconv"), nf, nf)
	m.ConvLast = conv3x3(b.Sub("conv_last"), nf, cfg.OutNC)
	return m
}

func lrelu(x *trace.Tensor) *trace.Tensor { return op.LeakyReLU(x, 0.2) }

// Forward applies the dense block.
func (d *ResidualDenseBlock) Forward(x *trace.Tensor) *trace.Tensor {
	return d.Scope(x, func() *trace.Tensor {
		feats := []*trace.Tensor{x}
		for k := range 4 {
			feats = append(feats, lrelu(d.Conv[k].Forward(op.Cat(1, feats...))))
		}
		x5 := d.Conv[4].Forward(op.Cat(1, feats...))
		return op.Add(op.Scale(x5, 0.2), x)
	})
}

// Forward applies the three dense blocks and the outer residual.
func (r *RRDB) Forward(x *trace.Tensor) *trace.Tensor {
	out := x
	for _, d := range r.RDB {
		out = d.Forward(out)
	}
	return r.Scope(x, func() *trace.Tensor { return op.Add(op.Scale(out, 0.2), x) })
}

// Forward maps [N, in_nc, H, W] to [N, out_nc, 4H, 4W].
func (m *RRDBNet) Forward(x *trace.Tensor) *trace.Tensor {
	fea := m.ConvFirst.Forward(x)
	t := fea
	for _, r := range m.Trunk {
		if m.Checkpoint {
			t = nn.Checkpoint(t, r.Forward)
		} else {
			t = r.Forward(t)
		}
	}
	trunk := m.TrunkConv.Forward(t)
	return m.Scope(x, func() *trace.Tensor {
		fea = op.Add(fea, trunk)
		fea = lrelu(m.UpConv1.Forward(op.UpsampleNearest(fea, 2)))
		fea = lrelu(m.UpConv2.Forward(op.UpsampleNearest(fea, 2)))
		return m.ConvLast.Forward(lrelu(m.HRConv.Forward(fea)))
	})
}
