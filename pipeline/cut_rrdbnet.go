package pipeline

import (
	"fmt"

	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// RRDBNetLayers is a zoo RRDBNet as pipeline layers: one per RRDB block,
// conv_first in the first and trunk_conv with the upsampling tail in the
// last, with ESRGAN's parameter names. The trunk's long skip (conv_first's
// output, added after trunk_conv) goes along with the activation: between
// layers the tensor is the trunk's activation and the skip concatenated
// on the channels, so every stage boundary carries both, and the skip's
// gradient flows back with the activation's.
func RRDBNetLayers(cfg zoo.RRDBNetConfig) ([]Layer, error) {
	if cfg.NB < 1 {
		return nil, fmt.Errorf("pipeline: RRDBNet %+v has no blocks to cut", cfg)
	}
	nf := cfg.NF
	build := func(b nn.Builder) *zoo.RRDBNet { return zoo.NewRRDBNet(b, cfg) }
	var ls []Layer
	for k := range cfg.NB {
		first, last := k == 0, k == cfg.NB-1
		ls = append(ls, func(b nn.Builder) train.Model {
			return unit(b, build, func(m *zoo.RRDBNet) (train.Model, []string) {
				blk := m.Trunk[k]
				prefixes := []string{fmt.Sprintf("RRDB_trunk.%d", k)}
				if first {
					prefixes = append(prefixes, "conv_first")
				}
				if last {
					prefixes = append(prefixes, "trunk_conv", "upconv1", "upconv2", "HRconv", "conv_last")
				}
				return forward(func(x *trace.Tensor) *trace.Tensor {
					var t, fea *trace.Tensor
					if first {
						fea = m.ConvFirst.Forward(x)
						t = fea
					} else {
						t, fea = op.Narrow(x, 1, 0, nf), op.Narrow(x, 1, nf, nf)
					}
					if m.Checkpoint {
						t = nn.Checkpoint(t, blk.Forward)
					} else {
						t = blk.Forward(t)
					}
					if !last {
						return op.Cat(1, t, fea)
					}
					// RRDBNet.Forward after the trunk.
					trunk := m.TrunkConv.Forward(t)
					return m.Scope(x, func() *trace.Tensor {
						fea = op.Add(fea, trunk)
						fea = lrelu(m.UpConv1.Forward(op.UpsampleNearest(fea, 2)))
						fea = lrelu(m.UpConv2.Forward(op.UpsampleNearest(fea, 2)))
						return m.ConvLast.Forward(lrelu(m.HRConv.Forward(fea)))
					})
				}), prefixes
			})
		})
	}
	return ls, nil
}

func lrelu(x *trace.Tensor) *trace.Tensor { return op.LeakyReLU(x, 0.2) }
