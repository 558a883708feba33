package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
)

func cmdPlan(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	model := fs.String("model", "cnn", "model: cnn or mlp (Fashion-MNIST inputs)")
	batch := fs.Int("batch", 64, "batch size")
	opt := fs.String("optimizer", "adam", "optimizer: adam, adamw or sgd")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: headroom plan [flags]\n\nPrints the memory plan of one training step, computed on the meta device\n(shapes only, no data, no kernels).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	dev := device.Meta()
	store := nn.NewStore()
	m, err := buildFashionModel(*model, store)
	if err != nil {
		return err
	}
	if err := store.Materialize(dev, 1); err != nil {
		return err
	}
	o, err := newOptimizer(*opt, 1e-3)
	if err != nil {
		return err
	}
	tr, err := train.New(dev, store, m, crossEntropy, o)
	if err != nil {
		return err
	}
	mp, err := tr.Plan(trace.Meta{DType: tensor.Float32, Shape: tensor.Shape{*batch, 1, 28, 28}}, trace.Meta{DType: tensor.Int64, Shape: tensor.Shape{*batch}})
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stdout, "model %s, %d parameters, batch %d, optimizer %s\n", *model, store.NumParams(), *batch, *opt)
	mp.Print(os.Stdout)
	return nil
}
