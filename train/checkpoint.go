package train

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/headroom-ml/headroom/internal/safefile"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/safetensors"
	"github.com/headroom-ml/headroom/tensor"
)

// A checkpoint is a directory ROOT/step-NNNNNNNNN holding
//
//	model.safetensors      the weights, under the store's state_dict names
//	                       (loadable with --load, or by PyTorch)
//	optimizer.safetensors  the optimizer's buffers, as PARAM/BUFFER
//	                       (layer.weight/exp_avg, fc.bias/momentum_buffer)
//	state.json             everything else: step, epoch, position in the
//	                       epoch, the trainer's pass counter (it seeds
//	                       dropout), the learning rate, the optimizer's
//	                       per-parameter counts, the gradient scaler, the
//	                       learning-rate schedule's position and the
//	                       caller's metadata
//
// It is written into ROOT/.tmp-step-NNNNNNNNN-* (every file synced), then
// renamed into place and the root synced, so a checkpoint directory that
// exists is complete. CleanCheckpoints removes what a killed run left.

// CheckpointFormat is the version of state.json's layout.
const CheckpointFormat = 1

const (
	modelFile     = "model.safetensors"
	optimizerFile = "optimizer.safetensors"
	stateFile     = "state.json"
	stepPrefix    = "step-"
	tmpPrefix     = ".tmp-"
)

// ErrNoCheckpoint is returned by LatestCheckpoint and LoadCheckpoint when
// a directory holds no checkpoint.
var ErrNoCheckpoint = errors.New("train: no checkpoint")

// Checkpoint is where a run is, beyond what the trainer holds.
type Checkpoint struct {
	// Step is the number of optimizer steps (batches) taken.
	Step int64 `json:"step"`
	// Epoch and Batch are the position of the next batch: batch Batch
	// (0-based) of epoch Epoch, as dataset.State.
	Epoch int `json:"epoch"`
	Batch int `json:"batch"`
	// Passes is the trainer's count of forward/backward passes after the
	// last complete step (Trainer.Passes then); it seeds dropout. A step
	// interrupted half way has counted some passes of its own, which a
	// resumed run must not skip, so the caller records it after each
	// complete step.
	Passes int64 `json:"passes"`
	// Schedule is the learning-rate scheduler's position, when the caller
	// runs one (the trainer holds the optimizer, not its schedule).
	Schedule *optim.SchedulerState `json:"schedule,omitempty"`
	// Meta is the caller's: model name, data, flags.
	Meta map[string]string `json:"meta,omitempty"`
}

type scalerState struct {
	Scale          float64 `json:"scale"`
	GrowthFactor   float64 `json:"growth_factor"`
	BackoffFactor  float64 `json:"backoff_factor"`
	GrowthInterval int     `json:"growth_interval"`
	GrowthTracker  int     `json:"growth_tracker"`
	Skipped        int     `json:"skipped"`
}

type optimizerState struct {
	Kind   string                      `json:"kind"`
	LR     float64                     `json:"lr"`
	Counts map[string]map[string]int64 `json:"counts"`
}

type checkpointState struct {
	Format int `json:"format"`
	Checkpoint
	Splits    int             `json:"splits"`
	Optimizer *optimizerState `json:"optimizer,omitempty"`
	Scaler    *scalerState    `json:"scaler,omitempty"`
}

// Checkpointer writes and reads the model and optimizer state of a
// trainer that holds only pieces of them (package dist: ZeRO-3's shards,
// tensor parallelism's slices), set as Trainer.Checkpointer: a checkpoint
// is then the whole model's, the file one process writes.
type Checkpointer interface {
	// Store is the whole model, materialized: SaveCheckpoint writes it as
	// the model file, LoadCheckpoint reads the model file into it.
	Store() *nn.Store
	// SaveState is the optimizer's whole state.
	SaveState() (optim.SavedState, error)
	// Load takes the trainer's pieces of Store (just read) and of the
	// optimizer's whole state s (nil: no optimizer).
	Load(s *optim.SavedState) error
}

// Passes is the number of forward/backward passes the trainer has run (the
// counter that seeds dropout masks), for Checkpoint.Passes.
func (t *Trainer) Passes() int64 { return t.step }

// SaveCheckpoint writes the trainer's state and c as ROOT/step-NNNNNNNNN
// (c.Step) and returns that directory. With keep > 0 only the newest keep
// checkpoints under root are left. The optimizer must be optim.Stateful.
func (t *Trainer) SaveCheckpoint(root string, c Checkpoint, keep int) (string, error) {
	if !t.Device.HasData() {
		return "", fmt.Errorf("train: checkpoint: device %v holds no data", t.Device)
	}
	st := checkpointState{Format: CheckpointFormat, Checkpoint: c, Splits: t.Splits}
	var opt map[string]*tensor.Tensor
	store := t.Store
	if t.Checkpointer != nil {
		store = t.Checkpointer.Store()
	}
	if t.Opt != nil {
		var s optim.SavedState
		if t.Checkpointer != nil {
			var err error
			if s, err = t.Checkpointer.SaveState(); err != nil {
				return "", fmt.Errorf("train: checkpoint: %w", err)
			}
		} else if so, ok := t.Opt.(optim.Stateful); ok {
			s = so.SaveState()
		} else {
			return "", fmt.Errorf("train: checkpoint: optimizer %T cannot save its state", t.Opt)
		}
		st.Optimizer = &optimizerState{Kind: s.Kind, LR: s.LR, Counts: s.Counts}
		opt = map[string]*tensor.Tensor{}
		for p, bufs := range s.Buffers {
			for b, v := range bufs {
				// A copy: the buffers are the optimizer's device memory.
				opt[p+"/"+b] = tensor.FromFloat32(tensor.Shape{len(v)}, slices.Clone(v))
			}
		}
	}
	if s := t.Scaler; s != nil {
		st.Scaler = &scalerState{s.Scale, s.GrowthFactor, s.BackoffFactor, s.GrowthInterval, s.growthTracker, s.Skipped}
	}
	js, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("train: checkpoint: %w", err)
	}
	name := fmt.Sprintf("%s%09d", stepPrefix, c.Step)
	tmp, err := os.MkdirTemp(root, tmpPrefix+name+"-")
	if err != nil {
		return "", fmt.Errorf("train: checkpoint: %w", err)
	}
	defer os.RemoveAll(tmp) // nothing left once renamed
	if err := store.SaveFile(filepath.Join(tmp, modelFile), c.Meta); err != nil {
		return "", fmt.Errorf("train: checkpoint: %w", err)
	}
	if opt != nil {
		if err := safetensors.WriteFile(filepath.Join(tmp, optimizerFile), opt, nil); err != nil {
			return "", fmt.Errorf("train: checkpoint: %w", err)
		}
	}
	if err := safefile.WriteFile(filepath.Join(tmp, stateFile), append(js, '\n'), 0o644); err != nil {
		return "", fmt.Errorf("train: checkpoint: %w", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", fmt.Errorf("train: checkpoint: %w", err)
	}
	dir := filepath.Join(root, name)
	// The same step saved twice (a save at the step Ctrl-C stopped at)
	// holds the same state: the new one replaces it.
	if err := os.RemoveAll(dir); err != nil {
		return "", fmt.Errorf("train: checkpoint: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", fmt.Errorf("train: checkpoint: %w", err)
	}
	syncDir(root)
	if keep > 0 {
		if err := pruneCheckpoints(root, keep); err != nil {
			return dir, err
		}
	}
	return dir, nil
}

// syncDir makes renames in dir durable; where a directory cannot be
// synced the files are complete anyway, so failure is not reported.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// Checkpoints returns the checkpoint directories under root, oldest
// (lowest step) first.
func Checkpoints(root string) ([]string, error) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	type ck struct {
		step int64
		path string
	}
	var cks []ck
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), stepPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		n, err := strconv.ParseInt(rest, 10, 64)
		if err != nil {
			continue
		}
		cks = append(cks, ck{n, filepath.Join(root, e.Name())})
	}
	slices.SortFunc(cks, func(a, b ck) int { return int(min(max(a.step-b.step, -1), 1)) })
	out := make([]string, len(cks))
	for i, c := range cks {
		out[i] = c.path
	}
	return out, nil
}

func pruneCheckpoints(root string, keep int) error {
	cks, err := Checkpoints(root)
	if err != nil {
		return err
	}
	for len(cks) > keep {
		if err := os.RemoveAll(cks[0]); err != nil {
			return fmt.Errorf("train: removing old checkpoint: %w", err)
		}
		cks = cks[1:]
	}
	return nil
}

// CleanCheckpoints removes what a run killed while writing a checkpoint
// under root left behind: .tmp-* directories and safefile's temporary
// files. It returns how many it removed; a root that does not exist is
// not an error.
func CleanCheckpoints(root string) (int, error) {
	ents, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, tmpPrefix) || strings.HasPrefix(name, ".") && strings.Contains(name, ".tmp-") {
			if err := os.RemoveAll(filepath.Join(root, name)); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}

// LatestCheckpoint resolves path to a checkpoint directory: path itself
// when it holds state.json, the directory of a file in one (state.json or
// model.safetensors), else the newest step-* directory under path.
func LatestCheckpoint(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if !fi.IsDir() {
		path = filepath.Dir(path)
	}
	if _, err := os.Stat(filepath.Join(path, stateFile)); err == nil {
		return path, nil
	}
	cks, err := Checkpoints(path)
	if err != nil {
		return "", err
	}
	if len(cks) == 0 {
		return "", fmt.Errorf("%w in %s", ErrNoCheckpoint, path)
	}
	return cks[len(cks)-1], nil
}

// LoadCheckpoint restores the trainer from the checkpoint at path (see
// LatestCheckpoint) — weights, optimizer state and learning rate,
// gradient scaler, pass counter — and returns the run's position. The
// trainer must be built as the saved one was (model, optimizer kind and
// hyperparameters); a mismatch is an error naming the file, after which
// the trainer may be partly loaded (build a fresh one).
func (t *Trainer) LoadCheckpoint(path string) (Checkpoint, string, error) {
	st, dir, err := readState(path)
	if err != nil {
		return Checkpoint{}, dir, err
	}
	if (st.Optimizer == nil) != (t.Opt == nil) {
		return Checkpoint{}, dir, fmt.Errorf("train: resume: %s: the checkpoint's optimizer (%v) and the trainer's (%T) differ", dir, st.Optimizer != nil, t.Opt)
	}
	// Everything is read and checked before the trainer changes.
	var saved optim.SavedState
	var so optim.Stateful
	if st.Optimizer != nil {
		var ok bool
		if so, ok = t.Opt.(optim.Stateful); !ok && t.Checkpointer == nil {
			return Checkpoint{}, dir, fmt.Errorf("train: resume: optimizer %T cannot load a state", t.Opt)
		}
		saved = optim.SavedState{Kind: st.Optimizer.Kind, LR: st.Optimizer.LR, Counts: st.Optimizer.Counts, Buffers: map[string]map[string][]float32{}}
		file := filepath.Join(dir, optimizerFile)
		tensors, err := safetensors.Load(file)
		if err != nil {
			return Checkpoint{}, dir, fmt.Errorf("train: resume: %w", err)
		}
		for key, v := range tensors {
			p, b, ok := cutLast(key, "/")
			if !ok || v.DType != tensor.Float32 {
				return Checkpoint{}, dir, fmt.Errorf("train: resume: %s: tensor %q is not PARAM/BUFFER float32", file, key)
			}
			if saved.Buffers[p] == nil {
				saved.Buffers[p] = map[string][]float32{}
			}
			saved.Buffers[p][b] = v.F32()
		}
	}
	if c := t.Checkpointer; c != nil {
		if err := c.Store().LoadFile(filepath.Join(dir, modelFile), true); err != nil {
			return Checkpoint{}, dir, fmt.Errorf("train: resume: %w", err)
		}
		var s *optim.SavedState
		if st.Optimizer != nil {
			s = &saved
		}
		if err := c.Load(s); err != nil {
			return Checkpoint{}, dir, fmt.Errorf("train: resume: %s: %w", dir, err)
		}
	} else if err := t.Store.LoadFile(filepath.Join(dir, modelFile), true); err != nil {
		return Checkpoint{}, dir, fmt.Errorf("train: resume: %w", err)
	}
	if so != nil && t.Checkpointer == nil {
		if err := so.LoadState(saved); err != nil {
			return Checkpoint{}, dir, fmt.Errorf("train: resume: %s: %w", dir, err)
		}
	}
	if s := st.Scaler; s != nil {
		t.Scaler = &GradScaler{Scale: s.Scale, GrowthFactor: s.GrowthFactor, BackoffFactor: s.BackoffFactor, GrowthInterval: s.GrowthInterval, growthTracker: s.GrowthTracker, Skipped: s.Skipped}
	}
	t.step = st.Passes
	t.Splits = st.Splits
	return st.Checkpoint, dir, nil
}

// ReadCheckpoint returns the position and metadata of the checkpoint at
// path (see LatestCheckpoint) and its directory, reading state.json only:
// a caller can check that a checkpoint fits its run before loading it.
func ReadCheckpoint(path string) (Checkpoint, string, error) {
	st, dir, err := readState(path)
	return st.Checkpoint, dir, err
}

func readState(path string) (checkpointState, string, error) {
	var st checkpointState
	dir, err := LatestCheckpoint(path)
	if err != nil {
		return st, "", fmt.Errorf("train: resume: %w", err)
	}
	file := filepath.Join(dir, stateFile)
	js, err := os.ReadFile(file)
	if err != nil {
		return st, dir, fmt.Errorf("train: resume: %w", err)
	}
	if err := json.Unmarshal(js, &st); err != nil {
		return st, dir, fmt.Errorf("train: resume: %s: %w", file, err)
	}
	if st.Format != CheckpointFormat {
		return st, dir, fmt.Errorf("train: resume: %s: format %d, want %d", file, st.Format, CheckpointFormat)
	}
	return st, dir, nil
}

func cutLast(s, sep string) (before, after string, ok bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}
