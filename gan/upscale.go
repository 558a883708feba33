package gan

import (
	"context"
	"errors"
	"fmt"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// ErrTileBudget is matched by errors.Is when not even the smallest tile's
// forward pass fits the budget.
var ErrTileBudget = errors.New("gan: no tile fits the budget")

// Upscaler runs an RRDBNet over a whole image in tiles, eval-only (no
// gradients, no optimizer state): Real-ESRGAN users set --tile by hand
// after out-of-memory errors; here the tile comes from plans.
type Upscaler struct {
	Config zoo.RRDBNetConfig
	tr     *train.Trainer
	store  *nn.Store
	// weights is what the weights reserve on the device (whole
	// segments, as the allocator maps them).
	weights int64
}

// RRDBNetConfigOf reads an RRDBNet's constructor from its weights' names
// and shapes (conv_first: in_nc→nf, RDB1.conv1: nf→gc, conv_last: nf→out_nc,
// and how many RRDB_trunk blocks there are).
func RRDBNetConfigOf(sd map[string]*tensor.Tensor) (zoo.RRDBNetConfig, error) {
	var c zoo.RRDBNetConfig
	first, ok1 := sd["conv_first.weight"]
	last, ok2 := sd["conv_last.weight"]
	rdb, ok3 := sd["RRDB_trunk.0.RDB1.conv1.weight"]
	if !ok1 || !ok2 || !ok3 || len(first.Shape) != 4 || len(last.Shape) != 4 || len(rdb.Shape) != 4 {
		return c, fmt.Errorf("gan: not RRDBNet weights (conv_first, RRDB_trunk.0.RDB1.conv1 and conv_last are needed)")
	}
	c.InNC, c.NF, c.GC, c.OutNC = first.Shape[1], first.Shape[0], rdb.Shape[0], last.Shape[0]
	for {
		if _, ok := sd[fmt.Sprintf("RRDB_trunk.%d.RDB1.conv1.weight", c.NB)]; !ok {
			break
		}
		c.NB++
	}
	return c, nil
}

// Overlap is the RRDBNet's receptive radius in input pixels: 2+15·nb 3x3
// convolutions at the input's resolution and four after the upsamplings
// (1.25 input pixels, rounded up, plus one for the nearest upsampling's
// rounding). A tile whose input reaches this far beyond its core on every
// cut side computes the core exactly as the whole image would.
func Overlap(c zoo.RRDBNetConfig) int { return 2 + 15*c.NB + 3 }

// NewUpscaler loads weights sd (RRDBNet's names) onto dev.
func NewUpscaler(dev *device.Device, sd map[string]*tensor.Tensor) (*Upscaler, error) {
	c, err := RRDBNetConfigOf(sd)
	if err != nil {
		return nil, err
	}
	return NewUpscalerConfig(dev, c, sd)
}

// NewUpscalerConfig is NewUpscaler of an RRDBNet of config c; sd may be
// nil on the meta device (planning a size no weights are at hand for).
func NewUpscalerConfig(dev *device.Device, c zoo.RRDBNetConfig, sd map[string]*tensor.Tensor) (*Upscaler, error) {
	if sd == nil && dev.HasData() {
		return nil, fmt.Errorf("gan: an upscaler on %v needs weights", dev)
	}
	s := nn.NewStore()
	m := zoo.NewRRDBNet(s.Root(), c)
	if err := s.Materialize(dev, 0); err != nil {
		return nil, err
	}
	if dev.HasData() {
		if err := s.LoadStateDict(sd, true); err != nil {
			s.Release()
			return nil, err
		}
	}
	s.SetTraining(false)
	// OptimizerInBackward: no gradient buffers are allocated (there is
	// no optimizer and no backward pass).
	tr, err := train.NewConfig(dev, s, m, nil, nil, train.Config{OptimizerInBackward: true})
	if err != nil {
		s.Release()
		return nil, err
	}
	// No gradient buffers: there is no backward pass.
	s.ReleaseGrads()
	dev.Alloc.EmptyCache()
	return &Upscaler{Config: c, tr: tr, store: s, weights: dev.Alloc.MemoryReserved()}, nil
}

// Close releases the weights and the arena.
func (u *Upscaler) Close() {
	u.tr.Close()
	u.store.Release()
}

// Memory is the planned device memory of one tile's forward pass with an
// input of h×w pixels: the segments the weights reserve and the one the
// pass's arena maps (a device's capacity limits reserved bytes: an arena
// under 10 MiB maps a 20 MiB segment, as PyTorch's allocator does).
func (u *Upscaler) Memory(h, w int) (int64, error) {
	p, err := u.tr.EvalProgram(trace.Meta{DType: tensor.Float32, Shape: tensor.Shape{1, u.Config.InNC, h, w}})
	if err != nil {
		return 0, err
	}
	return u.weights + device.SegmentSize(device.RoundSize(p.Plan.ArenaBytes)), nil
}

// window is the tile input's extent along one axis of n pixels for a tile
// of core pixels and overlap o: every window has the same size, so one
// program serves the whole image.
func window(n, core, o int) int { return min(n, core+2*o) }

// PlanTile returns the largest square tile core (input pixels) whose
// forward pass, with overlap o, fits budget for an h×w image; a core of
// max(h, w) is the untiled pass. It plans on the upscaler's device (the
// meta device: nothing runs).
//
// Planned memory does not grow monotonically with the window: the conv
// workspace depends on the shape (nf 16: a 400×400 window plans 472 MiB,
// 401×400 316 MiB), so a bisection can stop far below the largest tile.
// PlanTile scans the cores downward and returns the first that fits,
// skipping without planning those whose MemoryFloor is over the budget:
// the floor is close, so only a few windows are planned.
func (u *Upscaler) PlanTile(h, w, o int, budget int64) (int, error) {
	n := max(h, w)
	if m, err := u.Memory(h, w); err != nil {
		return 0, err
	} else if m <= budget {
		return n, nil
	}
	for core := n - 1; core >= 1; core-- {
		wh, ww := window(h, core, o), window(w, core, o)
		if (wh == h && ww == w) || u.MemoryFloor(wh, ww) > budget {
			continue // the untiled windows, or too large to plan
		}
		m, err := u.Memory(wh, ww)
		if err != nil {
			return 0, err
		}
		if m <= budget {
			return core, nil
		}
	}
	m, _ := u.Memory(window(h, 1, o), window(w, 1, o))
	return 0, fmt.Errorf("%w: a 1-pixel tile with overlap %d needs %s, over %s", ErrTileBudget, o, device.FormatBytes(m), device.FormatBytes(budget))
}

// MemoryFloor is a lower bound of Memory(h, w) that grows with the window,
// found without planning: the weights and the arena segment that holds at
// least HRconv's input and output together (nf channels each at 4h×4w,
// float32; a 3×3 convolution cannot write over its input). The segment
// mapped for the arena is at least its size, though not monotonically
// more (an arena under 10 MiB maps 20 MiB), so the floor counts the size.
func (u *Upscaler) MemoryFloor(h, w int) int64 {
	act := 2 * int64(u.Config.NF) * 16 * int64(h) * int64(w) * 4
	return u.weights + device.RoundSize(act)
}

// span is one tile along an axis: the input window [ws, ws+size) and its
// core [cs, ce), which the tile's output contributes.
type span struct{ ws, size, cs, ce int }

// Tiles is how many windows cover an axis of n pixels with tiles of core
// pixels and overlap o, as (window start, core start, core end) triples.
func Tiles(n, core, o int) [][3]int {
	var out [][3]int
	for _, s := range spans(n, core, o) {
		out = append(out, [3]int{s.ws, s.cs, s.ce})
	}
	return out
}

func spans(n, core, o int) []span {
	size := window(n, core, o)
	var out []span
	for cs := 0; cs < n; cs += core {
		ws := min(max(cs-o, 0), n-size)
		out = append(out, span{ws, size, cs, min(cs+core, n)})
	}
	return out
}

// Upscale runs the model over img ([1, in_nc, H, W], float32) in square
// tiles of core pixels with overlap o and returns [1, out_nc, 4H, 4W].
func (u *Upscaler) Upscale(ctx context.Context, img *tensor.Tensor, core, o int) (*tensor.Tensor, error) {
	if len(img.Shape) != 4 || img.Shape[0] != 1 || img.Shape[1] != u.Config.InNC {
		return nil, fmt.Errorf("gan: upscale wants [1, %d, H, W], got %v", u.Config.InNC, img.Shape)
	}
	if core < 1 || o < 0 {
		return nil, fmt.Errorf("gan: upscale: tile %d, overlap %d", core, o)
	}
	c, h, w := img.Shape[1], img.Shape[2], img.Shape[3]
	oc := u.Config.OutNC
	const s = 4
	out := make([]float32, oc*h*s*w*s)
	src := img.F32()
	for _, ys := range spans(h, core, o) {
		for _, xs := range spans(w, core, o) {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			tile := make([]float32, c*ys.size*xs.size)
			for ch := range c {
				for y := range ys.size {
					copy(tile[(ch*ys.size+y)*xs.size:][:xs.size], src[(ch*h+ys.ws+y)*w+xs.ws:][:xs.size])
				}
			}
			res, err := u.tr.Predict(ctx, tensor.FromFloat32(tensor.Shape{1, c, ys.size, xs.size}, tile))
			if err != nil {
				return nil, err
			}
			r := res.F32()
			tw, W := xs.size*s, w*s
			for ch := range oc {
				for y := s * ys.cs; y < s*ys.ce; y++ {
					ty := y - s*ys.ws
					copy(out[(ch*h*s+y)*W+s*xs.cs:][:s*(xs.ce-xs.cs)], r[(ch*ys.size*s+ty)*tw+s*(xs.cs-xs.ws):])
				}
			}
		}
	}
	return tensor.FromFloat32(tensor.Shape{1, oc, h * s, w * s}, out), nil
}
