package dist_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/dist"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// stepsOn trains batches[from:to] on n ranks (n = 1: one process, no
// dist) under ZeRO stage, resuming from the checkpoint resume if set and
// saving one at the end into root if set (the ZeRO state gathered on
// every rank, written by rank 0). It returns rank 0's weights and the
// checkpoint's directory.
func stepsOn(t *testing.T, n, stage int, batches []train.Batch, from, to int, resume, root string) (map[string][]float32, string) {
	t.Helper()
	var mu sync.Mutex
	var weights map[string][]float32
	var dir string
	run := func(ctx context.Context, c comm.Comm) error {
		dev := device.CPU()
		s := nn.NewStore()
		m := zoo.NewMLP(s.Root(), widths...)
		if err := s.Materialize(dev, 1); err != nil {
			return err
		}
		defer s.Release()
		var tr *train.Trainer
		var dp *dist.DataParallel
		var err error
		if c == nil {
			tr, err = train.New(dev, s, m, zoo.CrossEntropyLoss, newOpt(t, "adam"))
		} else {
			tr, dp, err = dist.NewTrainer(ctx, c, dev, s, m, zoo.CrossEntropyLoss, newOpt(t, "adam"), train.Config{}, dist.Options{Stage: stage, BucketBytes: 1000})
		}
		if err != nil {
			return err
		}
		defer tr.Close()
		if dp != nil {
			defer dp.Close()
		}
		if resume != "" {
			if _, _, err := tr.LoadCheckpoint(resume); err != nil {
				return err
			}
		}
		for _, b := range batches[from:to] {
			if c != nil {
				if b, err = dist.ShardBatch(b, c.Rank(), c.Size()); err != nil {
					return err
				}
			}
			if _, err := tr.Step(ctx, b.X, b.Y); err != nil {
				return err
			}
		}
		if root != "" {
			if dp != nil {
				if err := dp.GatherState(ctx); err != nil {
					return err
				}
			}
			if c == nil || c.Rank() == 0 {
				d, err := tr.SaveCheckpoint(root, train.Checkpoint{Step: int64(to)}, 0)
				if err != nil {
					return err
				}
				mu.Lock()
				dir = d
				mu.Unlock()
			}
		}
		if c == nil || c.Rank() == 0 {
			mu.Lock()
			weights = params(s)
			mu.Unlock()
		}
		return nil
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

// A ZeRO-2 run's checkpoint (optimizer shards gathered to rank 0, the
// file one process writes) resumes on 2 ranks and in one process, and a
// one-process checkpoint resumes under ZeRO on 2 and 3 ranks: the weights
// equal an uninterrupted run's within 1e-6.
func TestZeroCheckpoint(t *testing.T) {
	batches := data(4)
	for _, stage := range []int{1, 2} {
		t.Run(fmt.Sprintf("zero=%d", stage), func(t *testing.T) {
			straight, _ := stepsOn(t, 2, stage, batches, 0, 4, "", "")
			_, dir := stepsOn(t, 2, stage, batches, 0, 2, "", t.TempDir())
			for _, n := range []int{2, 1} {
				got, _ := stepsOn(t, n, stage, batches, 2, 4, dir, "")
				d := relDiff(got, straight)
				t.Logf("ZeRO-%d on 2 ranks, resumed on %d: %.3g from the uninterrupted run", stage, n, d)
				if d > 1e-6 || (n == 2 && d != 0) {
					t.Errorf("resumed on %d rank(s): weights %.3g from the uninterrupted run", n, d)
				}
			}
			one, _ := stepsOn(t, 1, 0, batches, 0, 4, "", "")
			_, dir1 := stepsOn(t, 1, 0, batches, 0, 2, "", t.TempDir())
			for _, n := range []int{2, 3} {
				got, _ := stepsOn(t, n, stage, batches, 2, 4, dir1, "")
				if d := relDiff(got, one); d > 1e-6 {
					t.Errorf("one process's checkpoint resumed on %d ranks: weights %.3g from one process's", n, d)
				} else {
					t.Logf("one process's checkpoint resumed on %d ranks under ZeRO-%d: %.3g", n, stage, d)
				}
			}
		})
	}
}

// Without GatherState a rank's shards do not pass for a whole state.
func TestZeroCheckpointNotGathered(t *testing.T) {
	root := t.TempDir()
	var dir string
	err := comm.Run(context.Background(), 2, func(ctx context.Context, c comm.Comm) error {
		dev := device.CPU()
		s := nn.NewStore()
		m := zoo.NewMLP(s.Root(), widths...)
		if err := s.Materialize(dev, 1); err != nil {
			return err
		}
		defer s.Release()
		tr, dp, err := dist.NewTrainer(ctx, c, dev, s, m, zoo.CrossEntropyLoss, newOpt(t, "adam"), train.Config{}, dist.Options{Stage: 1})
		if err != nil {
			return err
		}
		defer dp.Close()
		defer tr.Close()
		if c.Rank() == 0 {
			dir, err = tr.SaveCheckpoint(root, train.Checkpoint{Step: 1}, 0)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	s := nn.NewStore()
	m := zoo.NewMLP(s.Root(), widths...)
	dev := device.CPU()
	if err := s.Materialize(dev, 1); err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	tr, err := train.New(dev, s, m, zoo.CrossEntropyLoss, newOpt(t, "adam"))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if _, _, err := tr.LoadCheckpoint(dir); !errors.Is(err, optim.ErrState) {
		t.Fatalf("loading a rank's shards: %v", err)
	}
}
