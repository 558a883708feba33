package main

import (
	"context"
	"fmt"
	"io"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/dist"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// Data parallelism across tensor-parallel groups: `mpirun -np N headroom
// train --tensor T` with N a multiple of T runs N/T groups of T
// consecutive ranks (dist.HybridGroups); each group splits the GPT as
// --tensor does on T ranks and trains on its share of every batch, the
// pieces' gradients summed (or, with --zero 1 or 2, sharded) across the
// groups. Rank 0 prints, saves and logs.

// dataRank is this rank's place among the data-parallel ranks: its tensor
// group's (rank/T of N/T) under --tensor T, else its own.
func (d *distFlags) dataRank() (rank, size int) {
	if d.c == nil {
		return 0, 1
	}
	t := max(d.tensor, 1)
	return d.c.Rank() / t, d.c.Size() / t
}

// tensorGroup is the group whose ranks hold the pieces of one model: the
// tensor group with several data groups, else the whole job.
func (d *distFlags) tensorGroup() comm.Comm {
	if d.tp != nil {
		return d.tp
	}
	return d.c
}

// checkHybrid refuses --tensor T on N ranks where N is not a multiple of
// T, or what data parallelism across the groups does not support.
func (f *trainFlags) checkHybrid(size int) error {
	d := &f.dist
	switch {
	case size%d.tensor != 0:
		return fmt.Errorf("--tensor %d on %d ranks: the ranks must be a multiple of the tensor-parallel ranks (groups of %d, data parallelism across them)", d.tensor, size, d.tensor)
	case d.zero == 3:
		return fmt.Errorf("--tensor %d with --zero 3 on %d ranks: ZeRO 3 across tensor-parallel groups is not available (it gathers whole parameters, not a layer's pieces); use --zero 0, 1 or 2", d.tensor, size)
	case f.budget != "":
		return fmt.Errorf("--budget with --tensor %d on %d ranks: not supported across tensor-parallel groups yet (plan the ranks with `headroom plan --ranks %d --tensor %d --budget B`)", d.tensor, size, size, d.tensor)
	case f.ckptDir != "" || f.resume != "":
		return fmt.Errorf("--checkpoint-dir/--resume with --tensor %d on %d ranks: checkpoints across tensor-parallel groups are not supported yet (--save writes the gathered weights at the end)", d.tensor, size)
	case f.data != "":
		return fmt.Errorf("--data with --tensor %d on %d ranks: not supported across tensor-parallel groups yet (generated data only)", d.tensor, size)
	case f.batch < size/d.tensor:
		return fmt.Errorf("--batch-size %d: fewer samples than the %d tensor-parallel groups", f.batch, size/d.tensor)
	}
	return nil
}

// newHybridTrainer is newShardedTrainer's tensor parallelism with several
// groups (dist.NewHybridTrainer): the rank's piece of g, loaded from full's
// initial weights, trained by its tensor group on the group's share of
// each batch, with ZeRO --zero across the groups.
func (d *distFlags) newHybridTrainer(ctx context.Context, out io.Writer, dev *device.Device, full *nn.Store, g *zoo.GPT, loss train.LossFunc, opt optim.Optimizer, cfg train.Config) (*train.Trainer, func(), error) {
	tp, dp, err := dist.HybridGroups(ctx, d.c, d.tensor)
	if err != nil {
		return nil, nil, err
	}
	s := nn.NewStore()
	s.SetTraining(full.Training())
	m, err := zoo.NewTPGPT(s.Root(), g.Config, tp.Rank(), tp.Size())
	if err != nil {
		return nil, nil, err
	}
	if err := s.Materialize(dev, 0); err != nil {
		return nil, nil, err
	}
	if err := m.LoadFull(full.StateDict(), false); err != nil {
		s.Release()
		return nil, nil, err
	}
	var bucket int64
	if d.bucket != "" {
		bucket, _ = device.ParseBytes(d.bucket)
	}
	tr, par, err := dist.NewHybridTrainer(ctx, tp, dp, dev, s, m, loss, opt, cfg, dist.Options{Stage: d.zero, BucketBytes: bucket, Agree: d.agree})
	if err != nil {
		s.Release()
		return nil, nil, err
	}
	d.tp, d.dp = tp, par
	fmt.Fprintf(out, "data × tensor parallel: %d ranks (MPI) as %d groups of %d tensor-parallel ranks (attention heads and MLP columns split), each group on its share of every batch, ZeRO stage %d across the groups; rank 0 prints, saves and logs\n",
		d.c.Size(), dp.Size(), tp.Size(), d.zero)
	return tr, func() { tr.Close(); par.Close(); s.Release() }, nil
}

// hybridLayouts are the data × tensor layouts `plan --budget` tries for a
// GPT: every tensor degree T below ranks that divides them and the heads,
// with ZeRO 0 and (without clipping) 2 across the ranks/T groups.
func hybridLayouts(j dist.Job, ranks int, bucket int64, clip bool) []dist.Layout {
	cfg, err := dist.TensorGPTConfig(j)
	if err != nil {
		return nil
	}
	var ls []dist.Layout
	for t := 2; t < ranks; t++ {
		if ranks%t != 0 || zoo.CheckTensorParallel(cfg, t) != nil || j.Batch < ranks/t {
			continue
		}
		ls = append(ls, dist.Layout{Ranks: ranks, Tensor: t, BucketBytes: bucket})
		if !clip {
			ls = append(ls, dist.Layout{Ranks: ranks, Tensor: t, Zero: 2, BucketBytes: bucket})
		}
	}
	return ls
}
