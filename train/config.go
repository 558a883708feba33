package train

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/headroom-ml/headroom/transform"
)

// Config is how a step is trained: a comparable value. The trainer's
// compiled steps are cached under the configuration and the input
// shapes, so a step compiled under one configuration is never run under
// another. Set it with Trainer.SetConfig (or at construction, NewConfig
// and SetupConfig).
type Config struct {
	// Accumulation > 1 makes Step split each batch into that many
	// micro-batches (train.Split) run one after the other, their gradients
	// added up (StepAccumulate); 0 or 1: the whole batch in one pass.
	Accumulation int
	// Precision is the step's numeric precision (zero value: fp32). For
	// fp16-mixed SetConfig installs a GradScaler unless one is set.
	Precision transform.Precision
	// Recompute selects activations recomputed in the backward pass
	// instead of kept (activation checkpointing); zero value: none.
	Recompute Recompute
	// Storage is how saved activations are stored between forward and
	// backward (bf16, fp16, int8, offload, ReLU masks as bits); the zero
	// value keeps them as produced.
	Storage transform.Compression
	// OptimizerInBackward applies the optimizer inside the step: each
	// parameter is updated as soon as its gradient is final, after every
	// other read of the parameter in the step, and the gradient's arena
	// buffer is then dead and reused (PyTorch's optimizer step in
	// backward, register_post_accumulate_grad_hook). Gradients are no
	// longer kept between steps: gradient buffers are freed (as
	// zero_grad(set_to_none=True)) and gradients live in the step's arena
	// only while in flight, which lowers the peak by about the gradients'
	// bytes. Results are bit-identical to the usual step.
	//
	// It applies only where it is exactly the usual step (see
	// CheckOptimizerInBackward); other steps take the usual path, with
	// gradient buffers. A step that does not fit in memory is retried on
	// the usual path, which splits it.
	OptimizerInBackward bool
	// GradientBuffers keeps every gradient in a persistent buffer of its
	// own, held for the whole step and between steps (the zero value does
	// not, where it applies). By default each step's gradients are values
	// of the step's arena instead: a gradient takes memory from the moment
	// the backward pass produces it until the optimizer (with the
	// GradScaler and ClipNorm, which need every gradient first) has read
	// it at the end of the step, so the peak is the largest sum of live
	// activations and the gradients produced so far, where gradient
	// buffers add every gradient to it. That is PyTorch's
	// zero_grad(set_to_none=True) before each step, its default since
	// 2.0. Results are bit for bit the same either way (any optimizer,
	// clipping and loss scaling).
	//
	// With gradients in the arena, after a step the parameters' Grad are
	// views of the arena, readable until the trainer next runs (Step,
	// Predict), ReleaseMemory or Close, which copies them into gradient
	// buffers of the store.
	//
	// The arena applies to steps of one micro-batch on one process (no
	// Parallel), in every precision (under the bf16 and fp16 modes each
	// gradient leaves the step rounded, as it would be rounded into its
	// buffer); other steps keep gradient buffers whatever this says:
	// accumulation adds micro-batches' gradients into them (ArenaApplies).
	// OptimizerInBackward, where it applies, comes first.
	// (Left out of JSON when false.)
	GradientBuffers bool `json:",omitempty"`
	// Outputs keeps the model's outputs of every step for Trainer.Outputs
	// (training metrics without a second forward pass). They stay in the
	// step's arena until its end, which the memory plan counts.
	Outputs bool
	// Parallel, when set, makes the trainer one rank of data-parallel
	// training (package dist): each step's gradients are combined with
	// the other ranks' before the optimizer. nil: one process. Its
	// dynamic type must be comparable (a pointer), as Config values are
	// compared; it is a live object, not a setting, so not in the JSON.
	Parallel Parallel `json:"-"`
	// Threads is how many threads the trainer's kernels split their loops
	// across, on a pool of the trainer's own: two trainers in one process
	// each get theirs, even while both step. 0 follows the process-wide
	// count (internal/parallel's default: $HEADROOM_NUM_THREADS, else
	// GOMAXPROCS; headroom's --threads), still on the trainer's own
	// pool. It changes how fast a step runs, never its results or memory.
	// (Left out of JSON when 0, so configurations written before it read
	// and write the same.)
	Threads int `json:",omitempty"`
}

// compress is the storage policy handed to the precision pass: nil when
// nothing is stored differently, as transform.ParseCompress("none").
func (c Config) compress() transform.CompressPolicy {
	if c.Storage == (transform.Compression{}) {
		return nil
	}
	return c.Storage
}

// ArenaApplies reports whether a step of microBatches micro-batches
// under c keeps its gradients in the arena: not GradientBuffers, one
// micro-batch, one process. (OptimizerInBackward, where it
// applies, still comes first: Trainer.GradientsInArena.) The one rule the
// trainer and the budget planner both follow.
func (c Config) ArenaApplies(microBatches int) bool {
	return !c.GradientBuffers && microBatches == 1 && c.Accumulation <= 1 && c.Parallel == nil
}

// String names the configuration (for messages and cache keys).
func (c Config) String() string {
	s := fmt.Sprintf("acc=%d prec=%v recompute=%v storage=%v", max(c.Accumulation, 1), c.Precision, c.Recompute, c.Storage)
	if b := c.Storage.MinBytes; b > 0 && c.Storage.To != transform.Keep {
		s += ">=" + strconv.FormatInt(b, 10)
	}
	if c.OptimizerInBackward {
		s += " in-backward"
	}
	if c.GradientBuffers {
		s += " grad-buffers"
	}
	if c.Outputs {
		s += " outputs"
	}
	if c.Parallel != nil {
		s += " parallel"
	}
	if c.Threads > 0 {
		s += fmt.Sprintf(" threads=%d", c.Threads)
	}
	return s
}

// StorageOf returns the storage policy p as a Config.Storage value: nil and
// transform.ParseCompress's policies are transform.Compression values.
func StorageOf(p transform.CompressPolicy) (transform.Compression, error) {
	switch p := p.(type) {
	case nil:
		return transform.Compression{}, nil
	case transform.Compression:
		return p, nil
	}
	return transform.Compression{}, fmt.Errorf("train: saved-activation storage %T is not a size-threshold policy (transform.Compression)", p)
}

// RecomputeKind is the kind of a recomputation policy.
type RecomputeKind uint8

const (
	// RecomputeNone keeps every activation the backward pass reads.
	RecomputeNone RecomputeKind = iota
	// RecomputeSelective recomputes the ops RecomputeOps names
	// (transform.Selective) or, with no names, those whose traits say
	// they are cheap to recompute (transform.CheapOps).
	RecomputeSelective
	// RecomputeRegions recomputes the nodes recorded in checkpoint
	// regions (transform.Regions).
	RecomputeRegions
	// RecomputeNodes recomputes an explicit set of forward nodes by ID in
	// the traced step (transform.Nodes): the budget planner's choice.
	RecomputeNodes
	// RecomputeCustom is a policy of the caller's own type, compared by
	// its value (a type whose values compare, such as a pointer).
	RecomputeCustom
)

var recomputeNames = [...]string{"none", "selective", "regions", "nodes", "custom"}

func (k RecomputeKind) String() string {
	if int(k) < len(recomputeNames) {
		return recomputeNames[k]
	}
	return fmt.Sprintf("RecomputeKind(%d)", k)
}

// Recompute is a recomputation policy as a comparable value: its kind and,
// for sets of ops or nodes, the set in a canonical form, so that two
// policies that recompute the same nodes compare equal.
type Recompute struct {
	Kind   RecomputeKind
	set    string           // sorted op names or node IDs, comma-separated
	custom transform.Policy // RecomputeCustom: of a comparable type
}

// Recompute values for the policies without a set.
var (
	NoRecompute = Recompute{}
	// Selective recomputes transform.CheapOps.
	Selective = Recompute{Kind: RecomputeSelective}
	// Regions recomputes checkpoint regions.
	Regions = Recompute{Kind: RecomputeRegions}
)

// RecomputeIDs recomputes the forward nodes with these IDs.
func RecomputeIDs(ids transform.Nodes) Recompute {
	if len(ids) == 0 {
		return Recompute{Kind: RecomputeNodes}
	}
	var keys []int
	for id, on := range ids {
		if on {
			keys = append(keys, id)
		}
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, id := range keys {
		parts[i] = strconv.Itoa(id)
	}
	return Recompute{Kind: RecomputeNodes, set: strings.Join(parts, ",")}
}

// RecomputeOps recomputes the named ops (transform.Selective).
func RecomputeOps(ops ...string) Recompute {
	ops = slices.Clone(ops)
	slices.Sort(ops)
	ops = slices.Compact(ops)
	return Recompute{Kind: RecomputeSelective, set: strings.Join(ops, ",")}
}

// errPolicy is returned by RecomputeOf for a policy it cannot represent.
var errPolicy = errors.New("train: recomputation policy cannot be a Config value")

// RecomputeOf returns policy p as a Recompute value: nil, transform.Selective,
// transform.Regions, transform.Nodes and policies of any comparable type.
func RecomputeOf(p transform.Policy) (Recompute, error) {
	switch p := p.(type) {
	case nil:
		return NoRecompute, nil
	case transform.Cheap:
		return Selective, nil
	case transform.Selective:
		var ops []string
		for op, on := range p.Ops {
			if on {
				ops = append(ops, op)
			}
		}
		return RecomputeOps(ops...), nil
	case transform.Regions:
		return Regions, nil
	case transform.Nodes:
		return RecomputeIDs(p), nil
	}
	if !reflect.TypeOf(p).Comparable() {
		return NoRecompute, fmt.Errorf("%w: %T values do not compare (use a pointer)", errPolicy, p)
	}
	return Recompute{Kind: RecomputeCustom, custom: p}, nil
}

// MustRecompute is RecomputeOf for policies known to be representable.
func MustRecompute(p transform.Policy) Recompute {
	r, err := RecomputeOf(p)
	if err != nil {
		panic(err)
	}
	return r
}

// Policy is the transform.Policy r stands for (nil for none).
func (r Recompute) Policy() transform.Policy {
	switch r.Kind {
	case RecomputeSelective:
		if r.set == "" {
			return transform.CheapOps
		}
		ops := map[string]bool{}
		for _, op := range strings.Split(r.set, ",") {
			ops[op] = true
		}
		return transform.Selective{Ops: ops}
	case RecomputeRegions:
		return transform.Regions{}
	case RecomputeCustom:
		return r.custom
	case RecomputeNodes:
		return transform.Nodes(maps.Collect(func(yield func(int, bool) bool) {
			for _, id := range r.IDs() {
				if !yield(id, true) {
					return
				}
			}
		}))
	}
	return nil
}

// IDs lists the node IDs of a RecomputeNodes policy in increasing order.
func (r Recompute) IDs() []int {
	if r.Kind != RecomputeNodes || r.set == "" {
		return nil
	}
	parts := strings.Split(r.set, ",")
	ids := make([]int, len(parts))
	for i, p := range parts {
		ids[i], _ = strconv.Atoi(p)
	}
	return ids
}

func (r Recompute) String() string {
	switch {
	case r.Kind == RecomputeNodes:
		return fmt.Sprintf("nodes(%d)", len(r.IDs()))
	case r.set != "":
		return fmt.Sprintf("%v(%s)", r.Kind, r.set)
	}
	return r.Kind.String()
}
