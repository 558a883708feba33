package main

import (
	"errors"
	"fmt"
	"strconv"

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
// from: the same computation, with the zoo model's parameter names (so a
// pipeline's weights load into the single-process model and back). mlp
// (2 layers) and cnn (4) are plain sequences; the ResNets are cut at
// their residual blocks, the GPTs at their transformer blocks (the token
// embedding tied to the LM head: pipeline.GPTLayers) and rrdbnet at its
// RRDB blocks (the trunk's skip sent with the activation).
func zooLayers(name string) ([]pipeline.Layer, error) {
	switch name {
	case "mlp":
		widths := []int{784, 256, 10}
		var ls []pipeline.Layer
		for i := 0; i+1 < len(widths); i++ {
			in, out, relu := widths[i], widths[i+1], i+2 < len(widths)
			ls = append(ls, func(b nn.Builder) train.Model {
				// zoo.MLP's nn.Sequential index: a ReLU between linears.
				l := nn.NewLinear(b.Store().Root().Sub(strconv.Itoa(2*i)), in, out, true)
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
		conv := func(name string, in, out int) pipeline.Layer {
			return func(b nn.Builder) train.Model {
				c := nn.NewConv2d(b.Store().Root().Sub(name), in, out, 3, op.ConvOpts{Padding: [2]int{1, 1}}, true)
				return forwardFunc(func(x *trace.Tensor) *trace.Tensor {
					return op.MaxPool2d(op.ReLU(c.Forward(x)), op.PoolOpts{Kernel: [2]int{2, 2}})
				})
			}
		}
		return []pipeline.Layer{conv("conv1", 1, 32), conv("conv2", 32, 64),
			func(b nn.Builder) train.Model {
				l := nn.NewLinear(b.Store().Root().Sub("fc1"), 64*7*7, 128, true)
				return forwardFunc(func(x *trace.Tensor) *trace.Tensor {
					return op.ReLU(l.Forward(op.Reshape(x, tensor.Shape{x.Dim(0), -1})))
				})
			},
			func(b nn.Builder) train.Model { return nn.NewLinear(b.Store().Root().Sub("fc2"), 128, 10, true) },
		}, nil
	}
	spec, err := zoo.Lookup(name)
	if err != nil {
		return nil, err
	}
	ls, err := pipeline.ZooLayers(spec)
	if errors.Is(err, pipeline.ErrNoUnits) || errors.Is(err, pipeline.ErrDropout) {
		return nil, fmt.Errorf("%w: --pipeline of model %s: %w", dist.ErrNotAvailable, name, err)
	}
	return ls, err
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
