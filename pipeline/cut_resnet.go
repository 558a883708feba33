package pipeline

import (
	"fmt"
	"strconv"

	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// ResNetLayers is a zoo ResNet as pipeline layers: one per residual
// block, the stem (conv1, bn1, max pool) in the first and the head
// (average pool, fc) in the last, with torchvision's parameter names.
func ResNetLayers(cfg zoo.ResNetConfig) ([]Layer, error) {
	type pos struct{ s, i int }
	var blocks []pos
	for s, n := range cfg.Layers {
		for i := range n {
			blocks = append(blocks, pos{s, i})
		}
	}
	if len(blocks) == 0 || cfg.NumClasses <= 0 {
		return nil, fmt.Errorf("pipeline: ResNet %+v has no blocks to cut", cfg)
	}
	build := func(b nn.Builder) *zoo.ResNet { return zoo.NewResNet(b, cfg) }
	var ls []Layer
	for k, at := range blocks {
		first, last := k == 0, k == len(blocks)-1
		ls = append(ls, func(b nn.Builder) train.Model {
			return unit(b, build, func(m *zoo.ResNet) (train.Model, []string) {
				blk := m.Stages[at.s][at.i]
				prefixes := []string{"layer" + strconv.Itoa(at.s+1) + "." + strconv.Itoa(at.i)}
				if first {
					prefixes = append(prefixes, "conv1", "bn1")
				}
				if last {
					prefixes = append(prefixes, "fc")
				}
				return forward(func(x *trace.Tensor) *trace.Tensor {
					if first {
						// ResNet.Forward's stem.
						x = m.Scope(x, func() *trace.Tensor {
							return m.MaxPool.Forward(op.ReLU(m.BN1.Forward(m.Conv1.Forward(x))))
						})
					}
					x = blk.Forward(x)
					if last {
						x = m.Scope(x, func() *trace.Tensor {
							x = m.AvgPool.Forward(x)
							x = op.Reshape(x, tensor.Shape{x.Dim(0), -1})
							return m.FC.Forward(x)
						})
					}
					return x
				}), prefixes
			})
		})
	}
	return ls, nil
}

type forward func(x *trace.Tensor) *trace.Tensor

func (f forward) Forward(x *trace.Tensor) *trace.Tensor { return f(x) }
