package dist

import (
	"context"
	"fmt"
	"slices"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// Checkpoints of trainers that hold pieces of the model (ZeRO-3's flat
// shards, tensor parallelism's slices), as ZeRO 1 and 2 write theirs
// (DataParallel.GatherState): every rank gathers the whole weights and
// optimizer state at the same point between steps (collectives), then one
// rank's Trainer.SaveCheckpoint writes them — the checkpoint one process
// writes, loadable with --load or in one process. A resume reads the
// whole checkpoint on every rank and cuts each rank's pieces out of it;
// on the same number of ranks it continues bit for bit.

// ShardCheckpoints is a sharded trainer's train.Checkpointer. The whole
// model lives in a host store of its own (outside the rank's plan).
type ShardCheckpoints struct {
	c     comm.Comm
	t     *train.Trainer
	full  *nn.Store
	z     *Zero3 // ZeRO-3; nil: tensor parallelism
	saved *optim.SavedState
}

// Checkpoints makes the ZeRO-3 trainer's checkpoints go through full, the
// whole model materialized on a host device (its values are overwritten
// by Gather and by a resume), and returns them.
func (z *Zero3) Checkpoints(full *nn.Store) (*ShardCheckpoints, error) {
	if z.t == nil || z.c == nil {
		return nil, fmt.Errorf("%w: ZeRO-3 checkpoints need a rank's trainer", ErrConfig)
	}
	return newShardCheckpoints(z.c, z.t, full, z)
}

// TensorCheckpoints makes tensor-parallel trainer t's checkpoints (rank
// c.Rank() of the GPT split by zoo.NewTPGPT) go through full, the whole
// GPT materialized on a host device.
func TensorCheckpoints(c comm.Comm, t *train.Trainer, full *nn.Store) (*ShardCheckpoints, error) {
	return newShardCheckpoints(c, t, full, nil)
}

func newShardCheckpoints(c comm.Comm, t *train.Trainer, full *nn.Store, z *Zero3) (*ShardCheckpoints, error) {
	if full == nil || full.Device() == nil || !full.Device().HasData() {
		return nil, fmt.Errorf("%w: checkpoints of a sharded model need the whole model materialized on a device with data", ErrConfig)
	}
	for _, q := range t.Store.Params() {
		if _, ok := full.Get(q.Name); !ok {
			return nil, fmt.Errorf("%w: the whole model has no %s", ErrConfig, q.Name)
		}
	}
	k := &ShardCheckpoints{c: c, t: t, full: full, z: z}
	t.Checkpointer = k
	return k, nil
}

// Store implements train.Checkpointer.
func (k *ShardCheckpoints) Store() *nn.Store { return k.full }

// Gather gathers the whole weights into the host store and the whole
// optimizer state for the next SaveCheckpoint (on any rank). It is a
// collective: every rank calls it at the same point between steps.
func (k *ShardCheckpoints) Gather(ctx context.Context) error {
	k.saved = nil
	for _, q := range k.t.Store.Params() {
		if q.Value == nil || q.Value.Data == nil {
			return fmt.Errorf("%w: %s has no data", ErrConfig, q.Name)
		}
		p, _ := k.full.Get(q.Name)
		w, err := k.whole(ctx, q.Name, q.Value, p.Shape)
		if err != nil {
			return err
		}
		if w.DType != p.Value.DType || len(w.Data) != len(p.Value.Data) {
			return fmt.Errorf("%w: gathered %s is %v%v, the model's %v%v", ErrConfig, q.Name, w.DType, w.Shape, p.DType, p.Shape)
		}
		copy(p.Value.Data, w.Data)
	}
	if k.t.Opt == nil {
		return nil
	}
	so, ok := k.t.Opt.(optim.Stateful)
	if !ok {
		return fmt.Errorf("%w: optimizer %T cannot save its state", ErrConfig, k.t.Opt)
	}
	own := so.SaveState()
	whole := optim.SavedState{Kind: own.Kind, LR: own.LR, Buffers: map[string]map[string][]float32{}, Counts: map[string]map[string]int64{}}
	for _, q := range k.t.Store.Trainable() {
		// Every rank holds a piece of every parameter, so every rank has
		// the same buffers and counts (none before the first step).
		bufs := own.Buffers[q.Name]
		names := make([]string, 0, len(bufs))
		for b := range bufs {
			names = append(names, b)
		}
		slices.Sort(names)
		p, _ := k.full.Get(q.Name)
		m := map[string][]float32{}
		for _, b := range names {
			v := bufs[b]
			if len(v) != int(q.Numel()) {
				return fmt.Errorf("%w: %s of %s has %d values, the piece %d", optim.ErrState, b, q.Name, len(v), q.Numel())
			}
			w, err := k.whole(ctx, q.Name, tensor.FromFloat32(q.Shape, slices.Clone(v)), p.Shape)
			if err != nil {
				return err
			}
			m[b] = w.F32()
		}
		if len(m) > 0 {
			whole.Buffers[q.Name] = m
		}
		if c, ok := own.Counts[q.Name]; ok {
			whole.Counts[q.Name] = c
		}
	}
	k.saved = &whole
	return nil
}

// SaveState implements train.Checkpointer: the state Gather gathered.
func (k *ShardCheckpoints) SaveState() (optim.SavedState, error) {
	s := k.saved
	k.saved = nil
	if s == nil {
		return optim.SavedState{}, fmt.Errorf("%w: the optimizer state of a sharded model is not gathered (ShardCheckpoints.Gather on every rank first)", ErrConfig)
	}
	return *s, nil
}

// Load implements train.Checkpointer: this rank's pieces of the whole
// weights (just read into the host store) and of the whole state s.
func (k *ShardCheckpoints) Load(s *optim.SavedState) error {
	k.saved = nil
	for _, q := range k.t.Store.Params() {
		p, _ := k.full.Get(q.Name)
		v, err := k.piece(q.Name, p.Value)
		if err != nil {
			return err
		}
		if v.DType != q.Value.DType || len(v.Data) != len(q.Value.Data) {
			return fmt.Errorf("%w: %s's piece is %v%v, the rank's %v%v", ErrConfig, q.Name, v.DType, v.Shape, q.DType, q.Shape)
		}
		copy(q.Value.Data, v.Data)
	}
	if s == nil {
		return nil
	}
	so, ok := k.t.Opt.(optim.Stateful)
	if !ok {
		return fmt.Errorf("%w: optimizer %T cannot load a state", ErrConfig, k.t.Opt)
	}
	piece := optim.SavedState{Kind: s.Kind, LR: s.LR, Buffers: map[string]map[string][]float32{}, Counts: map[string]map[string]int64{}}
	for name, bufs := range s.Buffers {
		p, ok := k.full.Get(name)
		if !ok {
			return fmt.Errorf("%w: state of %q, which is not a parameter of the model", optim.ErrState, name)
		}
		m := map[string][]float32{}
		for b, v := range bufs {
			if len(v) != int(p.Numel()) {
				return fmt.Errorf("%w: %s of %q has %d values, the parameter %d", optim.ErrState, b, name, len(v), p.Numel())
			}
			c, err := k.piece(name, tensor.FromFloat32(p.Shape, v))
			if err != nil {
				return err
			}
			m[b] = c.F32()
		}
		piece.Buffers[name] = m
	}
	for name, c := range s.Counts {
		piece.Counts[name] = c
	}
	return so.LoadState(piece)
}

// whole is the whole tensor of shape shape of which piece is this rank's
// (a collective for pieces that differ by rank).
func (k *ShardCheckpoints) whole(ctx context.Context, name string, piece *tensor.Tensor, shape tensor.Shape) (*tensor.Tensor, error) {
	if piece.DType != tensor.Float32 || k.z != nil && !k.z.trainable(name) {
		return piece.Clone(), nil
	}
	n := piece.Shape.NumElements()
	all := make([]float32, n*k.c.Size())
	if err := k.c.AllGather(ctx, piece.F32(), all); err != nil {
		return nil, err
	}
	if k.z != nil {
		out := tensor.New(tensor.Float32, shape)
		copy(out.F32(), all) // the padding of the last shards dropped
		return out, nil
	}
	pieces := make([]*tensor.Tensor, k.c.Size())
	for r := range pieces {
		pieces[r] = tensor.FromFloat32(piece.Shape.Clone(), all[r*n:(r+1)*n])
	}
	return zoo.TPGather(name, pieces)
}

// piece is this rank's piece of whole tensor w of name.
func (k *ShardCheckpoints) piece(name string, w *tensor.Tensor) (*tensor.Tensor, error) {
	if k.z == nil {
		if w.DType != tensor.Float32 {
			return w.Clone(), nil
		}
		return zoo.TPShard(name, w, k.c.Rank(), k.c.Size())
	}
	if !k.z.trainable(name) {
		return w.Clone(), nil
	}
	n := w.Shape.NumElements()
	c := prim.ShardLen(n, k.z.size)
	out := tensor.New(tensor.Float32, tensor.Shape{c})
	lo := min(k.z.rank*c, n)
	copy(out.F32(), w.F32()[lo:min(lo+c, n)])
	return out, nil
}
