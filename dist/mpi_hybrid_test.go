//go:build mpi

package dist_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/dist"
	"github.com/headroom-ml/headroom/internal/mpitest"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/safetensors"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// Over MPI (mpirun -np 4: 2 data-parallel groups of 2 tensor-parallel
// ranks, communicators split by MPI_Comm_split), 3 steps of SGD on global
// batches of 5 sequences (shares 3 and 2) leave every rank with its piece
// of one process's weights within 1e-5 (relative), and each rank's
// measured peak of the last step equals the plan dist.PlanRank makes for
// it on the meta device, under ZeRO 0, 1 and 2 across the groups.
func TestMPIHybridTensor(t *testing.T) {
	if mpitest.Mode() == "" {
		out, err := mpitest.Test(t, 4, "TestMPIHybridTensor", "1", "-test.v")
		if err != nil {
			t.Fatalf("mpirun -np 4: %v\n%s", err, out)
		}
		t.Logf("%s", out)
		return
	}
	c := mpitest.Join(t)
	defer comm.Close(c)
	ctx := context.Background()
	var batches [][2]*tensor.Tensor
	for i := range 3 {
		batches = append(batches, [2]*tensor.Tensor{tpTokens(5, 8, tpConfig.VocabSize, 2*i+1), tpTokens(5, 8, tpConfig.VocabSize, 2*i+2)})
	}
	sd, _, _, params := tpFull(t, tpConfig, func() optim.Optimizer { return hybridOpt(t, "sgd") }, batches)
	tp, dp, err := dist.HybridGroups(ctx, c, 2)
	if err != nil {
		comm.Abort(c, err)
	}
	for _, zero := range []int{0, 1, 2} {
		l := dist.Layout{Ranks: c.Size(), Tensor: 2, Zero: zero}
		j := hybridJob(t, "sgd", 5)
		p, err := dist.PlanRank(ctx, j, l, c.Rank())
		if err != nil {
			comm.Abort(c, err)
		}
		dev := device.CPU()
		s := nn.NewStore()
		m, err := zoo.NewTPGPT(s.Root(), tpConfig, tp.Rank(), tp.Size())
		if err != nil {
			comm.Abort(c, err)
		}
		if err := s.Materialize(dev, 0); err != nil {
			comm.Abort(c, err)
		}
		if err := m.LoadFull(sd, true); err != nil {
			comm.Abort(c, err)
		}
		opt, _ := j.NewOptimizer()
		tr, par, err := dist.NewHybridTrainer(ctx, tp, dp, dev, s, m, zoo.GPTLoss, opt, train.Config{}, dist.Options{Stage: zero})
		if err != nil {
			comm.Abort(c, err)
		}
		for i, b := range batches {
			part, err := dist.ShardBatch(train.Batch{X: b[0], Y: b[1]}, dp.Rank(), dp.Size())
			if err != nil {
				comm.Abort(c, err)
			}
			if i == len(batches)-1 {
				dev.Alloc.ResetPeak()
			}
			if _, err := tr.Step(ctx, part.X, part.Y); err != nil {
				comm.Abort(c, err)
			}
		}
		if peak := dev.Alloc.MaxMemoryAllocated(); peak != p.Memory.Total() {
			t.Errorf("ZeRO %d rank %d: planned %d, measured %d", zero, c.Rank(), p.Memory.Total(), peak)
		} else {
			t.Logf("ZeRO %d rank %d (tensor rank %d, data rank %d): planned = measured = %d", zero, c.Rank(), tp.Rank(), dp.Rank(), peak)
		}
		worst := 0.0
		for _, q := range s.Trainable() {
			want, err := zoo.TPShard(q.Name, params[q.Name], tp.Rank(), tp.Size())
			if err != nil {
				comm.Abort(c, err)
			}
			d := maxRel(q.Value, want)
			worst = max(worst, d)
			if d > 1e-5 {
				t.Errorf("ZeRO %d rank %d: %s differs from its piece of one process's by %.3g", zero, c.Rank(), q.Name, d)
			}
		}
		t.Logf("ZeRO %d rank %d: weights within %.3g of one process's", zero, c.Rank(), worst)
		tr.Close()
		par.Close()
		s.Release()
	}
	if err := errors.Join(comm.Close(tp), comm.Close(dp)); err != nil {
		t.Error(err)
	}
}

// `mpirun -np 4 headroom train --tensor 2` trains the GPT as 2 groups of 2
// tensor-parallel ranks, and rank 0 saves the weights gathered from its
// group; `mpirun -np 3 ... --tensor 2` is refused on every rank.
func TestMPITrainHybridTensor(t *testing.T) {
	bin := mpitest.Headroom(t)
	gpt := filepath.Join(t.TempDir(), "gpt.safetensors")
	args := []string{bin, "train", "--model", "gpt-shakespeare-char", "--limit", "4", "--batch-size", "2", "--steps", "1", "--threads", "1", "--tensor", "2"}
	out, err := mpitest.Run(t, 4, nil, append(args, "--zero", "1", "--save", gpt)...)
	if err != nil || strings.Count(out, "data × tensor parallel: 4 ranks (MPI) as 2 groups of 2") != 1 || strings.Count(out, "gathered from 2 ranks") != 1 {
		t.Fatalf("mpirun -np 4 headroom train --tensor 2: %v\n%s", err, out)
	}
	if _, err := safetensors.Load(gpt); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", out)
	out, err = mpitest.Run(t, 3, nil, args...)
	if err == nil || !strings.Contains(out, "--tensor 2 on 3 ranks: the ranks must be a multiple") {
		t.Fatalf("mpirun -np 3 headroom train --tensor 2: %v\n%s", err, out)
	}
}
