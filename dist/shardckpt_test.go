package dist_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/dist"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// shardJob is what shardSteps trains: the test MLP under ZeRO-3, or the
// test GPT under tensor parallelism (every rank on the whole batch).
type shardJob struct {
	tensor  bool
	opt     string
	batches []train.Batch
}

func (j shardJob) build(s *nn.Store) (train.Model, train.LossFunc) {
	if j.tensor {
		return zoo.NewGPT(s.Root(), tpConfig), zoo.GPTLoss
	}
	return zoo.NewMLP(s.Root(), widths...), zoo.CrossEntropyLoss
}

// shardSteps trains j.batches[from:to] on n ranks (n = 1: one process),
// resuming from checkpoint resume if set and saving one into root at the
// end if set (every rank gathers, rank 0 writes). It returns the whole
// weights after the last step (gathered) and the checkpoint's directory.
func shardSteps(t *testing.T, j shardJob, n, from, to int, resume, root string) (map[string][]float32, string) {
	t.Helper()
	var mu sync.Mutex
	var weights map[string][]float32
	var dir string
	run := func(ctx context.Context, c comm.Comm) error {
		dev := device.CPU()
		host := nn.NewStore() // the whole model, on a host device of its own
		m, loss := j.build(host)
		if err := host.Materialize(device.CPU(), 1); err != nil {
			return err
		}
		defer host.Release()
		var tr *train.Trainer
		var k *dist.ShardCheckpoints
		var err error
		switch {
		case c == nil:
			tr, err = train.New(host.Device(), host, m, loss, newOpt(t, j.opt))
		case j.tensor:
			s := nn.NewStore()
			tp, err := zoo.NewTPGPT(s.Root(), tpConfig, c.Rank(), c.Size())
			if err != nil {
				return err
			}
			if err := s.Materialize(dev, 0); err != nil {
				return err
			}
			defer s.Release()
			if err := tp.LoadFull(host.StateDict(), false); err != nil {
				return err
			}
			if tr, err = dist.NewTensorTrainer(ctx, c, dev, s, tp, loss, newOpt(t, j.opt), train.Config{}); err != nil {
				return err
			}
			k, err = dist.TensorCheckpoints(c, tr, host)
		default:
			decl := nn.NewStore()
			dm, _ := j.build(decl)
			var z *dist.Zero3
			if tr, z, err = dist.NewZero3Trainer(ctx, c, dev, decl, dm, loss, newOpt(t, j.opt), train.Config{}, dist.Zero3Options{Seed: 1}); err != nil {
				return err
			}
			defer z.Close()
			k, err = z.Checkpoints(host)
		}
		if err != nil {
			return err
		}
		defer tr.Close()
		if resume != "" {
			if _, _, err := tr.LoadCheckpoint(resume); err != nil {
				return err
			}
		}
		for _, b := range j.batches[from:to] {
			if c != nil && !j.tensor {
				if b, err = dist.ShardBatch(b, c.Rank(), c.Size()); err != nil {
					return err
				}
			}
			if _, err := tr.Step(ctx, b.X, b.Y); err != nil {
				return err
			}
		}
		if k != nil {
			if err := k.Gather(ctx); err != nil {
				return err
			}
		}
		if c != nil && c.Rank() != 0 {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		weights = params(host)
		if root != "" {
			dir, err = tr.SaveCheckpoint(root, train.Checkpoint{Step: int64(to)}, 0)
		}
		return err
	}
	var err error
	if n == 1 {
		err = run(context.Background(), nil)
	} else {
		err = comm.Run(context.Background(), n, run)
	}
	if err != nil {
		t.Fatal(err)
	}
	return weights, dir
}

// A ZeRO-3 run's checkpoint (the MLP, Adam) and a tensor-parallel run's
// (the GPT, SGD with momentum) are the files one process writes: resumed
// on the same number of ranks the run continues bit for bit; resumed in
// one process, and a one process's checkpoint resumed on the ranks, the
// weights equal the uninterrupted run's within float tolerance.
func TestShardCheckpoint(t *testing.T) {
	var gptBatches []train.Batch
	for i := range 4 {
		gptBatches = append(gptBatches, train.Batch{X: tpTokens(4, 8, tpConfig.VocabSize, 2*i+1), Y: tpTokens(4, 8, tpConfig.VocabSize, 2*i+2)})
	}
	for _, tc := range []struct {
		name string
		job  shardJob
		n    []int
		tol  float64
	}{
		{"zero3", shardJob{opt: "adam", batches: data(4)}, []int{2, 3}, 1e-6},
		{"tensor", shardJob{tensor: true, opt: "sgd", batches: gptBatches}, []int{2, 3}, 1e-5},
	} {
		for _, n := range tc.n {
			t.Run(fmt.Sprintf("%s/%d", tc.name, n), func(t *testing.T) {
				straight, _ := shardSteps(t, tc.job, n, 0, 4, "", "")
				_, dir := shardSteps(t, tc.job, n, 0, 2, "", t.TempDir())
				got, _ := shardSteps(t, tc.job, n, 2, 4, dir, "")
				if d := relDiff(got, straight); d != 0 {
					t.Errorf("resumed on %d ranks: weights %.3g from the uninterrupted run, want bit for bit", n, d)
				}
				one, _ := shardSteps(t, tc.job, 1, 0, 4, "", "")
				got, _ = shardSteps(t, tc.job, 1, 2, 4, dir, "")
				if d := relDiff(got, one); d > tc.tol {
					t.Errorf("%d ranks' checkpoint resumed in one process: weights %.3g from one process's", n, d)
				} else {
					t.Logf("%d ranks' checkpoint resumed in one process: %.3g from one process's", n, d)
				}
				_, dir1 := shardSteps(t, tc.job, 1, 0, 2, "", t.TempDir())
				got, _ = shardSteps(t, tc.job, n, 2, 4, dir1, "")
				if d := relDiff(got, straight); d > tc.tol {
					t.Errorf("one process's checkpoint resumed on %d ranks: weights %.3g from the ranks' run", n, d)
				} else {
					t.Logf("one process's checkpoint resumed on %d ranks: %.3g from the ranks' run", n, d)
				}
			})
		}
	}
}
