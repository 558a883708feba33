package train_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
)

// dropMLP has dropout, whose masks depend on the trainer's pass counter:
// a resumed run that lost it would draw other masks.
type dropMLP struct {
	l1, l2 *nn.Linear
	drop   *nn.Dropout
}

func (m *dropMLP) Forward(x *trace.Tensor) *trace.Tensor {
	return m.l2.Forward(m.drop.Forward(op.ReLU(m.l1.Forward(x))))
}

type ckptCase struct {
	name   string
	opt    func() optim.Optimizer
	scaler bool
	accum  int
}

func ckptTrainer(t *testing.T, c ckptCase) *train.Trainer {
	t.Helper()
	dev, err := device.New("cpu")
	if err != nil {
		t.Fatal(err)
	}
	s := nn.NewStore()
	b := s.Root()
	m := &dropMLP{l1: nn.NewLinear(b.Sub("0"), 8, 16, true), drop: nn.NewDropout(b.Sub("1"), 0.3), l2: nn.NewLinear(b.Sub("2"), 16, 4, true)}
	if err := s.Materialize(dev, 7); err != nil {
		t.Fatal(err)
	}
	tr, err := train.New(dev, s, m, sse, c.opt())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close(); s.Release() })
	return tr
}

// runSteps takes steps [from, to) on batches that depend only on the step
// number, as a sampler's do on the epoch and position.
func runSteps(t *testing.T, tr *train.Trainer, c ckptCase, from, to int) []float64 {
	t.Helper()
	var losses []float64
	for s := from; s < to; s++ {
		x, y := batch(rand.New(rand.NewSource(int64(s))), 6)
		parts, err := train.Split(train.Batch{X: x, Y: y}, c.accum)
		if err != nil {
			t.Fatal(err)
		}
		l, err := tr.StepAccumulate(context.Background(), parts)
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, l)
	}
	return losses
}

func weightBytes(tr *train.Trainer) map[string][]byte {
	out := map[string][]byte{}
	for k, v := range tr.Store.StateDict() {
		out[k] = slices.Clone(v.Data)
	}
	return out
}

// TestCheckpointResumeExact: N steps straight equal k steps, a checkpoint,
// a fresh trainer resumed from it and N-k steps, bit for bit: losses,
// weights and optimizer state.
func TestCheckpointResumeExact(t *testing.T) {
	adam := func() optim.Optimizer { o, _ := optim.NewAdam(optim.AdamDefaults()); return o }
	cases := []ckptCase{
		{name: "adam", opt: adam, accum: 1},
		{name: "adamw", opt: func() optim.Optimizer { o, _ := optim.NewAdamW(optim.AdamWDefaults()); return o }, accum: 1},
		{name: "sgd-momentum", opt: func() optim.Optimizer { o, _ := optim.NewSGD(optim.SGDConfig{LR: 0.05, Momentum: 0.9}); return o }, accum: 1},
		{name: "adam-accumulate-scaler", opt: adam, accum: 3, scaler: true},
	}
	const n, k = 7, 3
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			straight := ckptTrainer(t, c)
			if c.scaler {
				straight.Scaler = train.NewGradScaler()
				straight.Scaler.GrowthInterval = 2 // grows during the run
			}
			wantLoss := runSteps(t, straight, c, 0, n)

			first := ckptTrainer(t, c)
			if c.scaler {
				first.Scaler = train.NewGradScaler()
				first.Scaler.GrowthInterval = 2
			}
			gotLoss := runSteps(t, first, c, 0, k)
			root := t.TempDir()
			dir, err := first.SaveCheckpoint(root, train.Checkpoint{Step: k, Epoch: 0, Batch: k, Passes: first.Passes(), Meta: map[string]string{"model": "dropmlp"}}, 2)
			if err != nil {
				t.Fatal(err)
			}
			if filepath.Base(dir) != "step-000000003" {
				t.Errorf("checkpoint directory %s", dir)
			}
			// More steps on the first trainer must not change the saved
			// state (the optimizer's buffers were copied).
			runSteps(t, first, c, k, k+1)

			resumed := ckptTrainer(t, c) // no scaler: the checkpoint brings it
			ck, _, err := resumed.LoadCheckpoint(root)
			if err != nil {
				t.Fatal(err)
			}
			if ck.Step != k || ck.Batch != k || ck.Meta["model"] != "dropmlp" {
				t.Errorf("position %+v", ck)
			}
			gotLoss = append(gotLoss, runSteps(t, resumed, c, k, n)...)
			if !slices.Equal(gotLoss, wantLoss) {
				t.Errorf("losses\n got %v\nwant %v", gotLoss, wantLoss)
			}
			if !reflect.DeepEqual(weightBytes(resumed), weightBytes(straight)) {
				t.Error("weights differ from the uninterrupted run")
			}
			ws, gs := straight.Opt.(optim.Stateful).SaveState(), resumed.Opt.(optim.Stateful).SaveState()
			if !reflect.DeepEqual(ws, gs) {
				t.Error("optimizer state differs from the uninterrupted run")
			}
			if resumed.Passes() != straight.Passes() {
				t.Errorf("passes %d, want %d", resumed.Passes(), straight.Passes())
			}
			if c.scaler && (resumed.Scaler == nil || *resumed.Scaler != *straight.Scaler) {
				t.Errorf("scaler %+v, want %+v", resumed.Scaler, straight.Scaler)
			}
		})
	}
}

func TestCheckpointKeepAndClean(t *testing.T) {
	c := ckptCase{opt: func() optim.Optimizer { o, _ := optim.NewSGD(optim.SGDConfig{LR: 0.1, Momentum: 0.9}); return o }, accum: 1}
	tr := ckptTrainer(t, c)
	root := t.TempDir()
	// What a run killed while saving leaves behind.
	if err := os.Mkdir(filepath.Join(root, ".tmp-step-000000009-123"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, ".x.tmp-456"), []byte("half"), 0o644); err != nil {
		t.Fatal(err)
	}
	n, err := train.CleanCheckpoints(root)
	if err != nil || n != 2 {
		t.Fatalf("CleanCheckpoints: %d, %v; want 2 removed", n, err)
	}
	for s := int64(1); s <= 4; s++ {
		runSteps(t, tr, c, int(s-1), int(s))
		if _, err := tr.SaveCheckpoint(root, train.Checkpoint{Step: s, Passes: tr.Passes()}, 2); err != nil {
			t.Fatal(err)
		}
	}
	cks, err := train.Checkpoints(root)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range cks {
		names = append(names, filepath.Base(p))
	}
	if want := []string{"step-000000003", "step-000000004"}; !slices.Equal(names, want) {
		t.Errorf("kept %v, want %v", names, want)
	}
	ents, _ := os.ReadDir(root)
	if len(ents) != 2 {
		t.Errorf("%d entries under the root, want the 2 checkpoints", len(ents))
	}
	// A file inside a checkpoint names it too.
	if dir, err := train.LatestCheckpoint(filepath.Join(cks[0], "model.safetensors")); err != nil || dir != cks[0] {
		t.Errorf("LatestCheckpoint(file) = %s, %v", dir, err)
	}
	if _, err := train.LatestCheckpoint(t.TempDir()); !errors.Is(err, train.ErrNoCheckpoint) {
		t.Errorf("empty directory: %v, want ErrNoCheckpoint", err)
	}
	// A checkpoint of another optimizer is refused, naming the problem.
	other := ckptTrainer(t, ckptCase{opt: func() optim.Optimizer { o, _ := optim.NewAdam(optim.AdamDefaults()); return o }})
	if _, _, err := other.LoadCheckpoint(root); !errors.Is(err, optim.ErrState) {
		t.Errorf("SGD checkpoint into Adam: %v, want optim.ErrState", err)
	}
	// model.safetensors is a plain state_dict file.
	data, err := os.ReadFile(filepath.Join(cks[1], "model.safetensors"))
	if err != nil || !bytes.Contains(data, []byte(`"0.weight"`)) {
		t.Errorf("model.safetensors: %v", err)
	}
}
