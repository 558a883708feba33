package main

import (
	"fmt"

	"github.com/headroom-ml/headroom/dist"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/pipeline"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

type forwardFunc func(x *trace.Tensor) *trace.Tensor

func (f forwardFunc) Forward(x *trace.Tensor) *trace.Tensor { return f(x) }

// zooLayers is a zoo model as the list of layers pipeline stages are cut
// from: the same computation and parameter shapes, each layer's
// parameters named under its index ("0.weight"). Only the models that are
// a plain sequence are lists: mlp (2 layers) and cnn (4). The ResNets
// (residual blocks, a sequence of blocks but not cut here yet), the GPTs
// (token and position embeddings shared with the head: weight tying
// across stages) and rrdbnet (a long skip from the first convolution to
// the trunk's end) are not.
func zooLayers(name string) ([]pipeline.Layer, error) {
	switch name {
	case "mlp":
		widths := []int{784, 256, 10}
		var ls []pipeline.Layer
		for i := 0; i+1 < len(widths); i++ {
			in, out, relu := widths[i], widths[i+1], i+2 < len(widths)
			ls = append(ls, func(b nn.Builder) train.Model {
				l := nn.NewLinear(b, in, out, true)
				return forwardFunc(func(x *trace.Tensor) *trace.Tensor {
					if len(x.Shape()) > 2 {
						x = op.Flatten(x, 1, -1)
					}
					y := l.Forward(x)
					if relu {
						y = op.ReLU(y)
					}
					return y
				})
			})
		}
		return ls, nil
	case "cnn":
		conv := func(in, out int) pipeline.Layer {
			return func(b nn.Builder) train.Model {
				c := nn.NewConv2d(b, in, out, 3, op.ConvOpts{Padding: [2]int{1, 1}}, true)
				return forwardFunc(func(x *trace.Tensor) *trace.Tensor {
					return op.MaxPool2d(op.ReLU(c.Forward(x)), op.PoolOpts{Kernel: [2]int{2, 2}})
				})
			}
		}
		return []pipeline.Layer{conv(1, 32), conv(32, 64),
			func(b nn.Builder) train.Model {
				l := nn.NewLinear(b, 64*7*7, 128, true)
				return forwardFunc(func(x *trace.Tensor) *trace.Tensor {
					return op.ReLU(l.Forward(op.Reshape(x, tensor.Shape{x.Dim(0), -1})))
				})
			},
			func(b nn.Builder) train.Model { return nn.NewLinear(b, 128, 10, true) },
		}, nil
	}
	return nil, fmt.Errorf("%w: --pipeline of model %s, which is not a list of layers here (mlp and cnn are)", dist.ErrNotAvailable, name)
}

// parseSchedule reads --schedule.
func parseSchedule(s string) (pipeline.Schedule, error) {
	switch s {
	case "gpipe":
		return pipeline.GPipe, nil
	case "1f1b":
		return pipeline.OneFOneB, nil
	}
	return 0, fmt.Errorf("--schedule %q: gpipe or 1f1b", s)
}

// pipelineJob is the job of --pipeline P > 1: the model's layers, in
// micro micro-batches under sched, cut to fit budget (0: evenly).
func pipelineJob(model string, p, micro int, sched string, budget int64) (*dist.PipelineJob, error) {
	if p <= 1 {
		return nil, nil
	}
	sc, err := parseSchedule(sched)
	if err != nil {
		return nil, err
	}
	ls, err := zooLayers(model)
	if err != nil {
		return nil, err
	}
	spec, err := zoo.Lookup(model)
	if err != nil {
		return nil, err
	}
	return &dist.PipelineJob{Layers: ls, Loss: spec.Loss, Schedule: sc, Micro: micro, Budget: budget}, nil
}
