package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// evalArena is the arena a forward pass of batch samples of set needs.
func evalArena(tr *train.Trainer, set evalSet, batch int) (int64, error) {
	idx := make([]int, batch)
	for i := range idx {
		idx[i] = set.lo + i
	}
	x, _, err := set.src.Batch(idx)
	if err != nil {
		return 0, err
	}
	was := tr.Store.Training()
	tr.Store.SetTraining(false)
	defer tr.Store.SetTraining(was)
	p, err := tr.EvalProgram(train.MetaOf(x))
	if err != nil {
		return 0, err
	}
	return p.Plan.ArenaBytes, nil
}

// squeeze caps dev so that after what it holds now (its cache emptied)
// only one more segment of the arena of a forward pass of keep samples
// can be mapped, and no segment for batch samples; keep 0: no new
// segment at all.
func squeeze(tr *train.Trainer, dev *device.Device, set evalSet, batch, keep int) error {
	full, err := evalArena(tr, set, batch)
	if err != nil {
		return err
	}
	tr.ReleaseMemory()
	limit := dev.Alloc.Stats().ReservedBytes.Current
	if keep > 0 {
		part, err := evalArena(tr, set, keep)
		if err != nil {
			return err
		}
		seg := device.SegmentSize(device.RoundSize(part))
		if device.SegmentSize(device.RoundSize(full)) <= seg {
			return fmt.Errorf("set-up: the arenas of %d and %d samples (%d, %d B) take segments of the same size", batch, keep, full, part)
		}
		limit += seg
	}
	return dev.Alloc.SetCapacity(limit)
}

// evalOnRanks evaluates set on in-process ranks of a ZeRO-3 or tensor-
// parallel trainer (the trainer `train --zero 3` and `--tensor` make),
// rank 1's device squeezed so that only keep samples fit (keep < 0: not
// squeezed). A deadline ends ranks left waiting in a collective.
func evalOnRanks(t *testing.T, model string, zero, tensor, ranks int, set evalSet, batch, keep int) (res []evalResult, errs []error, ooms int64) {
	t.Helper()
	spec, err := lookupSpec(model)
	if err != nil {
		t.Fatal(err)
	}
	res, errs = make([]evalResult, ranks), make([]error, ranks)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = comm.Run(ctx, ranks, func(ctx context.Context, c comm.Comm) error {
		full := nn.NewStore()
		m := spec.New(full.Root())
		if err := full.Materialize(device.CPU(), 1); err != nil {
			return err
		}
		defer full.Release()
		opt, err := newOptimizer("sgd", 0.1, -1)
		if err != nil {
			return err
		}
		d := distFlags{c: c, zero: zero, tensor: tensor}
		dev := device.CPU()
		tr, done, err := d.newShardedTrainer(ctx, io.Discard, dev, full, m, spec.Loss, opt, train.Config{})
		if err != nil {
			return err
		}
		defer done()
		if c.Rank() == 1 && keep >= 0 {
			if err := squeeze(tr, dev, set, batch, keep); err != nil {
				return err
			}
		}
		r := c.Rank()
		res[r], errs[r] = evaluate(ctx, tr, set, batch, d.evalComm(), nil)
		if r == 1 {
			ooms = dev.Alloc.Stats().NumOOMs
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for r, err := range errs {
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("rank %d waited in a collective the others did not join: %v", r, err)
		}
	}
	return res, errs, ooms
}

// Under ZeRO 3 and tensor parallelism a forward pass is collective: when
// one rank's evaluation batch does not fit, every rank splits it (they
// hung, the squeezed rank alone running two passes), the results are
// those of the unsqueezed ranks on every rank, and a single sample that
// does not fit ends the evaluation on every rank with the same error,
// naming the rank and its arena.
func TestEvaluateRanksAgreeOnSplits(t *testing.T) {
	withTinyGPT(t)
	for _, c := range []struct {
		model        string
		zero, tensor int
		batch        int
	}{
		{"mlp", 3, 1, 8192},
		{"gpt-tiny", 0, 2, 4096},
	} {
		t.Run(fmt.Sprintf("%s/zero=%d/tensor=%d", c.model, c.zero, c.tensor), func(t *testing.T) {
			spec, err := lookupSpec(c.model)
			if err != nil {
				t.Fatal(err)
			}
			synth, err := zoo.NewSynthetic(spec, 1)
			if err != nil {
				t.Fatal(err)
			}
			set := evalSet{"test", synthSource{synth}, 0, 2 * c.batch}
			want, errs, _ := evalOnRanks(t, c.model, c.zero, c.tensor, 2, set, c.batch, -1)
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d unsqueezed: %v", r, err)
				}
			}
			if want[0] != want[1] || want[0].n != 2*c.batch {
				t.Fatalf("unsqueezed ranks: %+v and %+v", want[0], want[1])
			}

			got, errs, ooms := evalOnRanks(t, c.model, c.zero, c.tensor, 2, set, c.batch, c.batch/2)
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d, rank 1 fitting half a batch: %v", r, err)
				}
			}
			if ooms == 0 {
				t.Fatalf("set-up: rank 1 never ran out of memory")
			}
			for r, g := range got {
				if g.n != want[0].n || g.correct != want[0].correct || g.targets != want[0].targets || math.Abs(g.loss-want[0].loss) > 1e-6*math.Abs(want[0].loss) {
					t.Errorf("rank %d in halves: %+v, whole batches %+v", r, g, want[0])
				}
			}

			_, errs, _ = evalOnRanks(t, c.model, c.zero, c.tensor, 2, set, c.batch, 0)
			t.Logf("rank 1's error: %v", errs[1])
			for r, err := range errs {
				var fe *evalFitError
				if !errors.As(err, &fe) || !errors.Is(err, device.ErrOutOfMemory) || fe.sample != 0 || fe.need[0] != 0 || fe.need[1] <= 0 ||
					!strings.Contains(err.Error(), "sample 0 alone does not fit on every rank (rank 1 needs an arena of") {
					t.Errorf("rank %d, nothing fitting on rank 1: %v", r, err)
				}
				if (r == 1) != strings.Contains(fmt.Sprint(err), "out of memory") {
					t.Errorf("rank %d: only rank 1's error should carry its out-of-memory: %v", r, err)
				}
			}
		})
	}
}

// In one process evaluate still halves a batch that does not fit, with
// the results of whole batches.
func TestEvaluateHalvesAlone(t *testing.T) {
	spec, err := lookupSpec("mlp")
	if err != nil {
		t.Fatal(err)
	}
	synth, err := zoo.NewSynthetic(spec, 1)
	if err != nil {
		t.Fatal(err)
	}
	const batch = 8192
	set := evalSet{"test", synthSource{synth}, 0, 2 * batch}
	eval := func(keep int) (evalResult, int64, error) {
		dev := device.CPU()
		tr := evalTrainer(t, spec, dev)
		if keep > 0 {
			if err := squeeze(tr, dev, set, batch, keep); err != nil {
				t.Fatal(err)
			}
		}
		res, err := evaluate(context.Background(), tr, set, batch, nil, nil)
		return res, dev.Alloc.Stats().NumOOMs, err
	}
	want, _, err := eval(0)
	if err != nil {
		t.Fatal(err)
	}
	got, ooms, err := eval(batch / 2)
	if err != nil {
		t.Fatal(err)
	}
	if ooms == 0 {
		t.Fatalf("set-up: never ran out of memory")
	}
	if got.n != want.n || got.correct != want.correct || math.Abs(got.loss-want.loss) > 1e-6*math.Abs(want.loss) {
		t.Errorf("in halves %+v, whole batches %+v", got, want)
	}
}

// evalTrainer is spec's model, initialized with seed 1 on dev, in a
// trainer without an optimizer (evaluation only), released at the end of
// the test.
func evalTrainer(t *testing.T, spec zoo.Spec, dev *device.Device) *train.Trainer {
	t.Helper()
	s := nn.NewStore()
	m := spec.New(s.Root())
	if err := s.Materialize(dev, 1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Release)
	tr, err := train.NewConfig(dev, s, m, spec.Loss, nil, train.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Close)
	return tr
}
