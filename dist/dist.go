// Package dist trains one model on several ranks (data parallelism) over a
// comm.Comm: each rank runs its share of every global batch, and the
// gradients are combined before the optimizer, so that the ranks keep
// identical weights equal (to float rounding) to training on the global
// batch in one process. With ZeRO (Options.Stage) the optimizer state
// (stage 1) and the gradients (stage 2) are sharded across the ranks. The
// buffers of the collectives are device allocations of category
// device.Communication, so that each rank's memory plan (train.Plan)
// counts them and equals what its allocator measures.
package dist

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/train"
)

// DefaultBucketBytes is the gradient bucket of plain data parallelism
// (stage 0 and 1), PyTorch DDP's bucket_cap_mb of 25.
const DefaultBucketBytes = 25 << 20

// Options configure data-parallel training.
type Options struct {
	// Stage is the ZeRO stage: 0, plain data parallelism (every rank holds
	// all gradients and optimizer state; gradients are all-reduced in
	// buckets); 1, optimizer state sharded (each rank updates its shard of
	// every parameter, then the parameters are all-gathered); 2,
	// gradients sharded too (reduce-scattered, each rank keeps its shard;
	// with the optimizer in the backward pass, so that no rank holds all
	// gradients at once).
	Stage int
	// BucketBytes is the size of the communication buffer (0:
	// DefaultBucketBytes): the gradient bucket of stages 0 and 1 (never
	// more than the gradients), the pieces in which ZeRO scatters and
	// gathers a parameter's shards (never more than the largest
	// parameter needs, at least one value per rank).
	BucketBytes int64
	// Agree is anything else every rank must have alike (a command's
	// data and schedule flags, say): NewTrainer checks it with the
	// model, the configuration and the options.
	Agree string
	// Overlap (stage 0) all-reduces each bucket of gradients as soon as
	// the backward pass has finished them, while it goes on: the step
	// runs with the optimizer in the backward pass, which copies each
	// final gradient into the buckets (one communication buffer of all
	// gradients, which replaces the gradient buffers), and the update
	// runs once every bucket is summed. Same results as stage 0. It needs
	// an optimizer that updates one parameter at a time and a step the
	// backward pass can update in (one micro-batch, fp32, no clipping or
	// loss scaling); other steps all-reduce after the backward pass.
	Overlap bool
}

var (
	// ErrConfig is matched by errors.Is for options or trainers that
	// cannot be made data-parallel.
	ErrConfig = errors.New("dist: configuration")
	// ErrMismatch is matched by errors.Is when the ranks were set up
	// differently (another model, configuration or stage).
	ErrMismatch = errors.New("dist: ranks differ")
)

// DataParallel is one rank's part in data-parallel training: the
// trainer's Config.Parallel, and the owner of the communication buffer
// and, under ZeRO-2, of the gradient shards.
type DataParallel struct {
	c     comm.Comm
	t     *train.Trainer
	stage int
	dev   *device.Device
	// buf is the communication buffer: the gradient bucket (stages 0 and
	// 1) and the pieces of parameters reduce-scattered or gathered
	// (stages 1 and 2).
	buf  []float32
	blks []*device.Block
	// grads are the gradient shards of stage 2, by parameter.
	grads map[string][]float32
	// ov is the optimizer of Options.Overlap; bucketFloats the size of
	// its buckets.
	ov           *overlapOpt
	bucketFloats int
	share        float64
	ctx          context.Context // the current step's, for the optimizer's collectives
}

// NewTrainer makes rank c.Rank()'s trainer of data-parallel training:
// train.NewConfig with cfg.Parallel set to the returned DataParallel (and,
// for ZeRO, opt wrapped so that each rank keeps its shard of the state).
// Every rank must call it with the same model, configuration and
// options: it checks that they agree (ErrMismatch, naming the ranks), and
// copies rank 0's parameters to the others, as PyTorch's DDP does. The
// store must be materialized on dev. Close the trainer, then the
// DataParallel.
func NewTrainer(ctx context.Context, c comm.Comm, dev *device.Device, store *nn.Store, model train.Model, loss train.LossFunc, opt optim.Optimizer, cfg train.Config, o Options) (*train.Trainer, *DataParallel, error) {
	if c == nil {
		return nil, nil, fmt.Errorf("%w: no communicator", ErrConfig)
	}
	if o.Stage < 0 || o.Stage > 2 {
		return nil, nil, fmt.Errorf("%w: ZeRO stage %d (valid: 0, 1, 2)", ErrConfig, o.Stage)
	}
	if o.BucketBytes < 0 {
		return nil, nil, fmt.Errorf("%w: bucket of %d bytes", ErrConfig, o.BucketBytes)
	}
	if cfg.Parallel != nil {
		return nil, nil, fmt.Errorf("%w: the configuration is already parallel", ErrConfig)
	}
	if store.Device() != dev {
		return nil, nil, fmt.Errorf("%w: the model's parameters are not on %v (materialize the store first)", ErrConfig, dev)
	}
	switch {
	case o.Overlap && o.Stage != 0:
		return nil, nil, fmt.Errorf("%w: overlapping the all-reduce with the backward pass is for ZeRO stage 0 (stage %d)", ErrConfig, o.Stage)
	case o.Overlap || o.Stage == 2:
		_, stepper := opt.(optim.ParamStepper)
		_, preparer := opt.(optim.Preparer)
		if !stepper || !preparer {
			return nil, nil, fmt.Errorf("%w: ZeRO-2 and overlap take each gradient as it arrives: %T cannot update one parameter at a time", ErrConfig, opt)
		}
		if cfg.OptimizerInBackward && o.Overlap {
			return nil, nil, fmt.Errorf("%w: the optimizer in the backward pass with overlap: gradients must be summed across ranks first (overlap does that)", ErrConfig)
		}
		cfg.OptimizerInBackward = true
	case cfg.OptimizerInBackward:
		return nil, nil, fmt.Errorf("%w: the optimizer in the backward pass with ZeRO stage %d: gradients must be combined across ranks first (ZeRO stage 2 does that, parameter by parameter)", ErrConfig, o.Stage)
	}
	d := &DataParallel{c: c, stage: o.Stage, dev: dev, share: 1, ctx: ctx}
	if err := d.agree(ctx, store, opt, cfg, o); err != nil {
		return nil, nil, err
	}
	if dev.HasData() {
		for _, p := range store.Params() {
			if v := p.Value.F32(); v != nil {
				if err := c.Broadcast(ctx, v, 0); err != nil {
					return nil, nil, err
				}
			}
		}
	}
	if err := d.allocate(store, o); err != nil {
		d.Close()
		return nil, nil, err
	}
	if o.Overlap {
		d.ov = &overlapOpt{inner: opt, d: d}
		opt = d.ov
	}
	if o.Stage > 0 {
		z := &zeroOpt{inner: opt, d: d, meta: !dev.HasData()}
		if z.meta {
			// Where the state of each rank's shards is planned: allocated
			// here, next in the order a real rank allocates (train's
			// meta path sizes the state of whole parameters only).
			if err := z.allocateMeta(store); err != nil {
				d.Close()
				return nil, nil, err
			}
		}
		opt = z
	}
	cfg.Parallel = d
	t, err := train.NewConfig(dev, store, model, loss, opt, cfg)
	if err != nil {
		d.Close()
		return nil, nil, err
	}
	d.t = t
	return t, d, nil
}

// Comm is the communicator of the rank.
func (d *DataParallel) Comm() comm.Comm { return d.c }

// Stage is the ZeRO stage.
func (d *DataParallel) Stage() int { return d.stage }

// Close frees the communication buffer and gradient shards.
func (d *DataParallel) Close() {
	if d.ov != nil {
		d.ov.stop()
	}
	for _, b := range d.blks {
		d.dev.Alloc.Free(b)
	}
	d.blks, d.buf, d.grads = nil, nil, nil
}

// span is the part of a parameter of n elements that rank r of size
// ranks owns under ZeRO: [lo, hi), in blocks of c (the last ones padded,
// possibly empty).
func span(n, r, size int) (lo, hi, c int) {
	c = (n + size - 1) / size
	lo = min(r*c, n)
	return lo, min(lo+c, n), c
}

// allocate makes the communication buffer and the gradient shards.
func (d *DataParallel) allocate(store *nn.Store, o Options) error {
	size := d.c.Size()
	var numels []int
	for _, p := range store.Trainable() {
		numels = append(numels, int(p.Numel()))
	}
	var floats int
	floats, d.bucketFloats = bufferFloats(numels, size, d.stage, o.BucketBytes, o.Overlap)
	alloc := func(n int, tag device.Tag) ([]float32, error) {
		if n == 0 {
			return nil, nil
		}
		b, err := d.dev.Alloc.Allocate(int64(n)*4, tag)
		if err != nil {
			return nil, fmt.Errorf("dist: rank %d: %w", d.c.Rank(), err)
		}
		d.blks = append(d.blks, b)
		if b.Data == nil {
			return nil, nil // meta
		}
		return (&tensor.Tensor{DType: tensor.Float32, Shape: tensor.Shape{n}, Data: b.Data}).F32(), nil
	}
	var err error
	what := "gradient bucket"
	if o.Overlap {
		what = "gradient buckets (overlapped)"
	}
	if d.stage > 0 {
		what = "ZeRO shards"
	}
	if d.buf, err = alloc(floats, device.Tag{Category: device.Communication, Op: what}); err != nil {
		return err
	}
	if d.stage == 2 {
		d.grads = map[string][]float32{}
		for _, p := range store.Trainable() {
			_, _, c := span(int(p.Numel()), d.c.Rank(), size)
			module := p.Name[:max(0, strings.LastIndexByte(p.Name, '.'))]
			if d.grads[p.Name], err = alloc(c, device.Tag{Category: device.Gradient, Module: module, Op: p.Name + " (shard)"}); err != nil {
				return err
			}
		}
	}
	return nil
}

// bufferFloats is the length of the communication buffer of a rank of
// size ranks at ZeRO stage stage whose trainable parameters have numels
// values, and the bucket's length in values.
func bufferFloats(numels []int, size, stage int, bucketBytes int64, overlap bool) (floats, bucketFloats int) {
	var total, padded int
	for _, n := range numels {
		total += n
		_, _, c := span(n, 0, size)
		padded = max(padded, c*size)
	}
	if bucketBytes == 0 {
		bucketBytes = DefaultBucketBytes
	}
	bucketFloats = max(int(min(bucketBytes/4, 1<<40)), 1)
	if stage < 2 {
		floats = min(bucketFloats, total)
	}
	if overlap {
		floats = total // every gradient has its place in the buckets
	}
	if stage > 0 {
		// Shards are reduce-scattered and gathered through the buffer in
		// pieces of a whole number of values per rank, at most a bucket
		// (and no more than the largest parameter needs).
		floats = max(floats, max(min(bucketFloats, padded)/size, 1)*size)
	}
	return floats, bucketFloats
}

// agree checks that every rank has the same model, configuration and
// options; a rank that differs is named on every rank.
func (d *DataParallel) agree(ctx context.Context, store *nn.Store, opt optim.Optimizer, cfg train.Config, o Options) error {
	h := fnv.New64a()
	fmt.Fprintf(h, "%T %v stage=%d bucket=%d overlap=%v %q\n", opt, cfg, o.Stage, o.BucketBytes, o.Overlap, o.Agree)
	for _, p := range store.Params() {
		fmt.Fprintf(h, "%s %v %v %v\n", p.Name, p.DType, p.Shape, p.Trainable)
	}
	sum := h.Sum64()
	// Four 16-bit pieces: float32 holds each exactly.
	mine := make([]float32, 4)
	for i := range mine {
		mine[i] = float32(sum >> (16 * i) & 0xffff)
	}
	root := slices.Clone(mine)
	if err := d.c.Broadcast(ctx, root, 0); err != nil {
		return err
	}
	differs := make([]float64, d.c.Size())
	if !slices.Equal(mine, root) {
		differs[d.c.Rank()] = 1
	}
	if err := d.c.AllReduce64(ctx, differs, comm.Sum); err != nil {
		return err
	}
	var bad []string
	for r, v := range differs {
		if v != 0 {
			bad = append(bad, fmt.Sprint(r))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: rank(s) %s differ from rank 0 in the model, the training configuration or the options (ZeRO stage, bucket, what Options.Agree says: a command's data and schedule); this is rank %d", ErrMismatch, strings.Join(bad, ", "), d.c.Rank())
	}
	return nil
}

// Share implements train.Parallel: this rank's weight over the global
// batch's.
func (d *DataParallel) Share(ctx context.Context, weight float64) (float64, error) {
	d.ctx = ctx
	if d.stage == 2 && d.t != nil && (d.t.ClipNorm > 0 || d.t.Scaler != nil) {
		// Both decide from all gradients, which no rank holds.
		return 0, fmt.Errorf("%w: rank %d: ZeRO-2 with gradient clipping or loss scaling (use stage 1)", ErrConfig, d.c.Rank())
	}
	w := []float64{weight}
	if err := d.c.AllReduce64(ctx, w, comm.Sum); err != nil {
		return 0, err
	}
	if d.ov != nil {
		d.ov.start(ctx)
	}
	if w[0] == 0 {
		d.share = 1 / float64(d.c.Size())
	} else {
		d.share = weight / w[0]
	}
	return d.share, nil
}

// Reduce implements train.Parallel: the gradients are summed across
// ranks (each was seeded with its share) in buckets, except under ZeRO-2,
// whose optimizer reduce-scatters them; the loss is the global batch's.
func (d *DataParallel) Reduce(ctx context.Context, params []optim.Param, loss float64) (float64, error) {
	overlapped := false
	if d.ov != nil {
		// Gradients came in the backward pass: the buckets are summed and
		// the update made; else the usual path's gradient buffers are
		// all-reduced below and the trainer's optimizer step updates.
		overlapped = d.ov.fill > 0
		if err := d.ov.end(params, overlapped); err != nil {
			return 0, err
		}
	}
	if d.stage < 2 && !overlapped {
		if err := d.allReduce(ctx, params); err != nil {
			return 0, err
		}
	}
	l := []float64{loss * d.share}
	if err := d.c.AllReduce64(ctx, l, comm.Sum); err != nil {
		return 0, err
	}
	return l[0], nil
}

// allReduce sums the gradients across ranks through the bucket: filled
// in parameter order, all-reduced when full and copied back. (Not
// overlapped with the backward pass: the step's program runs to its end
// first.)
func (d *DataParallel) allReduce(ctx context.Context, params []optim.Param) error {
	type seg struct {
		g  []float32
		at int
	}
	var segs []seg
	fill := 0
	flush := func() error {
		if fill == 0 {
			return nil
		}
		if err := d.c.AllReduce(ctx, d.buf[:fill], comm.Sum); err != nil {
			return err
		}
		for _, s := range segs {
			copy(s.g, d.buf[s.at:])
		}
		segs, fill = segs[:0], 0
		return nil
	}
	for _, p := range params {
		g := p.Grad
		for len(g) > 0 {
			k := min(len(g), len(d.buf)-fill)
			copy(d.buf[fill:], g[:k])
			segs = append(segs, seg{g[:k], fill})
			fill += k
			g = g[k:]
			if fill == len(d.buf) {
				if err := flush(); err != nil {
					return err
				}
			}
		}
	}
	return flush()
}
