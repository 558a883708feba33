package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/dist"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// flagSet reports whether the flag name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// moreLayouts are the layouts `plan --budget` tries besides ZeRO 0–2 when
// neither a stage nor a tensor degree is fixed: ZeRO 3 (not with
// clipping, which needs every gradient whole) and, for a GPT whose heads
// split evenly over all the ranks, tensor parallelism over them, then
// data parallelism across smaller tensor groups (hybridLayouts).
func moreLayouts(j dist.Job, ranks int, bucket int64, clip bool) []dist.Layout {
	var ls []dist.Layout
	if !clip {
		ls = append(ls, dist.Layout{Ranks: ranks, Zero: 3, BucketBytes: bucket})
	}
	if cfg, err := dist.TensorGPTConfig(j); err == nil && ranks > 1 && zoo.CheckTensorParallel(cfg, ranks) == nil {
		ls = append(ls, dist.Layout{Ranks: ranks, Tensor: ranks, BucketBytes: bucket})
	}
	return append(ls, hybridLayouts(j, ranks, bucket, clip)...) // disthybrid.go
}

// lookupSpec is zoo.Lookup; tests add models of their own (a GPT without
// dropout, whose ranks train exactly as one process).
var lookupSpec = zoo.Lookup

// sharded reports whether the ranks hold pieces of the model (ZeRO 3,
// tensor parallelism) rather than all of it.
func (d *distFlags) sharded() bool { return d.c != nil && (d.zero == 3 || d.tensor > 1) }

// checkSharded refuses, before anything runs, what ZeRO-3 and tensor
// parallelism do not support under mpirun yet.
func (f *trainFlags) checkSharded(size int) error {
	d := &f.dist
	if d.zero != 3 && d.tensor <= 1 {
		return nil
	}
	what := "--zero 3"
	if d.tensor > 1 {
		what = fmt.Sprintf("--tensor %d", d.tensor)
	}
	if d.tensor > 1 && d.tensor != size {
		if err := f.checkHybrid(size); err != nil { // disthybrid.go
			return err
		}
	}
	switch {
	case d.tensor > 1 && d.zero != 0 && d.tensor == size:
		return fmt.Errorf("--tensor %d with --zero %d: ZeRO shards over data-parallel ranks, and a tensor-parallel job has one", d.tensor, d.zero)
	case d.overlap:
		return fmt.Errorf("--overlap with %s: overlap is for ZeRO 0", what)
	case f.clipGrad > 0:
		return fmt.Errorf("--clip-grad with %s: clipping needs every gradient whole", what)
	case f.inBack:
		return fmt.Errorf("--optimizer-in-backward with %s: not supported", what)
	}
	return nil
}

// initDevice is where the full model is initialized (and --load read):
// the rank's device, or under ZeRO-3 and tensor parallelism a host device
// of its own, outside the rank's plan, from which the rank takes its
// pieces (every rank initializes alike, from the same seed).
func (d *distFlags) initDevice(dev *device.Device) *device.Device {
	if d.sharded() {
		return device.CPU()
	}
	return dev
}

// newShardedTrainer is newRankTrainer under ZeRO-3 (dist.NewZero3Trainer:
// the rank's shards of full's initial weights) or tensor parallelism
// (dist.NewTensorTrainer on the rank's piece of the GPT, zoo.NewTPGPT).
// full is the full model on its host device (initDevice); it is kept to
// gather the weights into for --save.
func (d *distFlags) newShardedTrainer(ctx context.Context, out io.Writer, dev *device.Device, full *nn.Store, model train.Model, loss train.LossFunc, opt optim.Optimizer, cfg train.Config) (*train.Trainer, func(), error) {
	d.full = full
	weights := full.StateDict()
	if d.zero == 3 {
		decl := nn.NewStore() // the model's declarations, unmaterialized
		decl.SetTraining(full.Training())
		for _, p := range full.Params() {
			decl.Add(&nn.Param{Name: p.Name, DType: p.DType, Shape: p.Shape.Clone(), Trainable: p.Trainable, Init: p.Init})
		}
		tr, z, err := dist.NewZero3Trainer(ctx, d.c, dev, decl, model, loss, opt, cfg, dist.Zero3Options{Weights: weights, Agree: d.agree, Prefetch: d.gatherPrefetch})
		if err != nil {
			return nil, nil, err
		}
		d.z3 = z
		if d.ckpt, err = z.Checkpoints(full); err != nil {
			tr.Close()
			z.Close()
			return nil, nil, err
		}
		fmt.Fprintf(out, "data parallel: %d ranks (MPI), each on its share of every batch, ZeRO stage 3 (parameters sharded, gathered per layer in the step); rank 0 prints, saves and logs\n", d.c.Size())
		return tr, func() { tr.Close(); z.Close() }, nil
	}
	g, ok := model.(*zoo.GPT)
	if !ok {
		return nil, nil, fmt.Errorf("--tensor %d: tensor parallelism splits the GPT models; %T is not one", d.tensor, model)
	}
	if d.tensor < d.c.Size() {
		return d.newHybridTrainer(ctx, out, dev, full, g, loss, opt, cfg) // disthybrid.go
	}
	s := nn.NewStore()
	s.SetTraining(full.Training())
	tp, err := zoo.NewTPGPT(s.Root(), g.Config, d.c.Rank(), d.c.Size())
	if err != nil {
		return nil, nil, err
	}
	if err := s.Materialize(dev, 0); err != nil {
		return nil, nil, err
	}
	if err := tp.LoadFull(weights, false); err != nil {
		s.Release()
		return nil, nil, err
	}
	tr, err := dist.NewTensorTrainer(ctx, d.c, dev, s, tp, loss, opt, cfg)
	if err != nil {
		s.Release()
		return nil, nil, err
	}
	if d.ckpt, err = dist.TensorCheckpoints(d.c, tr, full); err != nil {
		tr.Close()
		s.Release()
		return nil, nil, err
	}
	fmt.Fprintf(out, "tensor parallel: %d ranks (MPI), attention heads and MLP columns split, every rank on the whole batch; rank 0 prints, saves and logs\n", d.c.Size())
	return tr, func() { tr.Close(); s.Release() }, nil
}

// saveSharded is --save under ZeRO-3 and tensor parallelism: every rank
// gathers the weights (collectives: every rank at the same point, so not
// on interruption), rank 0 writes the full model's file, the one a
// single process writes.
func (d *distFlags) saveSharded(ctx context.Context, tr *train.Trainer, why, model string, out io.Writer) error {
	if d.save == "" {
		return nil
	}
	if why == "interrupted" {
		return fmt.Errorf("--save with ZeRO 3 or --tensor: not on interruption (the ranks gather the weights only at the same step)")
	}
	sd := map[string]*tensor.Tensor{}
	for _, p := range tr.Store.Params() {
		var v *tensor.Tensor
		var err error
		switch {
		case d.z3 != nil:
			v, err = d.z3.Gather(ctx, p.Name)
		case p.DType != tensor.Float32:
			v = p.Value.Clone()
		default:
			g := d.tensorGroup()
			all := make([]float32, int(p.Numel())*g.Size())
			if err = g.AllGather(ctx, p.Value.F32(), all); err != nil {
				break
			}
			pieces := make([]*tensor.Tensor, g.Size())
			for r := range pieces {
				pieces[r] = tensor.New(tensor.Float32, p.Shape)
				copy(pieces[r].F32(), all[r*int(p.Numel()):])
			}
			v, err = zoo.TPGather(p.Name, pieces)
		}
		if err != nil {
			return fmt.Errorf("--save %s: gathering %s: %w", d.save, p.Name, err)
		}
		sd[p.Name] = v
	}
	if d.c.Rank() != 0 {
		return nil
	}
	if err := d.full.LoadStateDict(sd, false); err != nil {
		return fmt.Errorf("--save %s: %w", d.save, err)
	}
	if err := d.full.SaveFile(d.save, map[string]string{"format": "pt", "model": model}); err != nil {
		return fmt.Errorf("--save %s (%s): %w", d.save, why, err)
	}
	fmt.Fprintf(out, "saved weights to %s (%s; gathered from %d ranks)\n", d.save, why, d.tensorGroup().Size())
	return nil
}
