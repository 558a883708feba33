package transform

import (
	"fmt"
	"sort"
	"strings"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// Format is how a saved activation (a forward value the backward pass
// reads) is held between the forward pass and the backward pass.
//
// Numerics of each format, for a float32 value x:
//
//   - Keep: x itself, exact.
//   - BF16: x rounded to bfloat16 (round-to-nearest-even): relative error at
//     most 2^-9 (0.2%), float32's range, so no overflow.
//   - FP16: x rounded to float16: relative error at most 2^-11 (0.05%) for
//     |x| in [6.1e-5, 65504]; smaller values lose precision (subnormals) or
//     flush to zero below 3e-8, larger ones become ±Inf.
//   - Int8: symmetric per-channel quantization (prim.Quantize): absolute error
//     at most max|x[c]|/254 in channel c, so small values in a channel with
//     a large one lose most of their digits.
//   - Bits: one bit per element, for ReLU outputs (and LeakyReLU outputs,
//     slope >= 0) that the backward reads only as masks; exact.
//   - Offload: the value's bytes move to a host pool outside the device
//     budget (HostPool) after the forward pass and come back before the
//     backward pass; exact, any dtype. The device keeps a one-byte token.
//     On the cpu device "host" is a second allocator over the same RAM, so
//     this is accounting (the device's capacity and statistics no longer
//     see the bytes) plus two copies; a GPU backend would copy over PCIe.
//
// Whenever a ReLU output is stored in a lossy format, the ReLU backward
// reads a bit mask of it instead (1/32 of the float32 size, exact), so
// masks are never changed by compression; the other readers get the
// decompressed value.
type Format uint8

const (
	Keep Format = iota
	BF16
	FP16
	Int8
	Bits
	Offload
)

var formatNames = [...]string{"none", "bf16", "fp16", "int8", "bits", "offload"}

func (f Format) String() string {
	if int(f) < len(formatNames) {
		return formatNames[f]
	}
	return fmt.Sprintf("Format(%d)", f)
}

// ParseFormat returns the format named s: none, bf16, fp16, int8, bits or
// offload.
func ParseFormat(s string) (Format, error) {
	for i, n := range formatNames {
		if n == s {
			return Format(i), nil
		}
	}
	return Keep, fmt.Errorf("unknown storage format %q (valid: %s)", s, strings.Join(formatNames[:], ", "))
}

// lowDType is the 16-bit type of BF16 and FP16.
func (f Format) lowDType() tensor.DType {
	switch f {
	case BF16:
		return tensor.BFloat16
	case FP16:
		return tensor.Float16
	}
	return tensor.Invalid
}

// StoredBytes is how many device bytes a float32 value of shape s takes in
// format f (unpadded).
func (f Format) StoredBytes(s tensor.Shape) int64 {
	n := int64(s.NumElements())
	switch f {
	case BF16, FP16:
		return 2 * n
	case Int8:
		c, _ := prim.QuantChannels(s, prim.QuantAxis(s))
		return n + 4*int64(c)
	case Bits:
		return (n + 7) / 8
	case Offload:
		return 1 // the token; the bytes are on the host
	}
	return 4 * n
}

// Saved describes a forward value that the backward pass reads: what a
// CompressPolicy decides on.
type Saved struct {
	Value *trace.Tensor
	// Readers are the backward nodes (and recomputed copies of forward
	// nodes) that read Value, in graph order.
	Readers []*trace.Node
	// MaskReaders counts the Readers that are ReLU backwards reading Value,
	// the ReLU's output, only to test it for > 0.
	MaskReaders int
	// Statistic marks a normalization's saved mean or inverse standard
	// deviation and attention's or cross-entropy's logsumexp: small, and
	// precision-critical (the backward divides by them or exponentiates
	// them). The policies of this package keep them.
	Statistic bool
}

// MaskOnly reports whether the backward reads Value only as a ReLU mask.
func (s Saved) MaskOnly() bool { return s.MaskReaders > 0 && s.MaskReaders == len(s.Readers) }

// Bytes is the value's size as produced.
func (s Saved) Bytes() int64 { return s.Value.Meta.Bytes() }

// Producer is the name of the op that produced the value ("input" for a
// step input).
func (s Saved) Producer() string {
	if s.Value.Node.Kind == trace.KindInput {
		return "input"
	}
	return s.Value.Node.Op.Name()
}

// CompressPolicy chooses how each saved activation is stored. Formats that
// do not apply to a value (anything but Keep for a non-float32 value, Bits
// for a value that is not a ReLU output read as a mask) are read as Keep.
type CompressPolicy interface {
	Format(s Saved) Format
}

// Exacter is implemented by policies that know a value is exactly
// representable in a format (the autocast's low-precision values): storing
// it there loses nothing, and its ReLU masks need no separate bits.
type Exacter interface {
	Exact(t *trace.Tensor, f Format) bool
}

// HostPool is host memory outside the device budget for offloaded
// activations (device.HostPool). A run binds the pool its offloads go to
// (exec.Options.Host, device.DefaultHost() when none): graphs hold none.
type HostPool = device.HostPool

// NewHostPool returns a pool allocating from dev (device.CPU() for a real
// host pool).
func NewHostPool(dev *device.Device) *HostPool { return device.NewHostPool(dev) }

// DefaultHost is the process-wide host pool.
func DefaultHost() *HostPool { return device.DefaultHost() }

// CompressFunc is a CompressPolicy written as a function.
type CompressFunc func(s Saved) Format

func (f CompressFunc) Format(s Saved) Format { return f(s) }

// DefaultMinBytes is the smallest saved tensor the size-threshold policies
// of ParseCompress compress: below it the bytes saved are noise next to
// the arena's 512-byte granularity and the extra nodes.
const DefaultMinBytes = 4096

// Compression stores every saved float32 tensor of at least MinBytes in
// format To, statistics excepted, and, with Masks, ReLU outputs that the
// backward reads only as masks as Bits whatever their size. It is the
// size-threshold policy.
type Compression struct {
	To       Format
	MinBytes int64
	Masks    bool
}

func (c Compression) Format(s Saved) Format {
	if c.Masks && s.MaskOnly() {
		return Bits
	}
	if s.Statistic || s.Bytes() < c.MinBytes {
		return Keep
	}
	return c.To
}

func (c Compression) String() string {
	if c.To == Keep {
		if c.Masks {
			return "masks"
		}
		return "none"
	}
	return c.To.String()
}

// CompressOps stores the saved outputs of the named ops (op names as
// Node.Op.Name(), "input" for step inputs) in the given formats: the
// by-op-kind policy. Statistics are kept.
type CompressOps map[string]Format

func (m CompressOps) Format(s Saved) Format {
	if s.Statistic {
		return Keep
	}
	return m[s.Producer()]
}

// TensorRef names a value of a graph: output Output of node ID.
type TensorRef struct{ Node, Output int }

// CompressTensors stores explicitly listed values (of the graph given to
// Compress) in the given formats; the rest are kept. It is how a planner
// states its choice.
type CompressTensors map[TensorRef]Format

func (m CompressTensors) Format(s Saved) Format {
	return m[TensorRef{s.Value.Node.ID, s.Value.Index}]
}

// Compressions is the list of names ParseCompress accepts.
var Compressions = []string{"none", "masks", "bf16", "fp16", "int8", "offload"}

// ParseCompress returns the policy named name: "none" (nil), "masks" (ReLU
// masks as bits only), or "bf16", "fp16", "int8", "offload" (every saved
// float32 tensor of at least DefaultMinBytes in that format, statistics
// excepted, and ReLU masks as bits; offload to DefaultHost).
func ParseCompress(name string) (CompressPolicy, error) {
	switch name {
	case "none", "":
		return nil, nil
	case "masks":
		return Compression{Masks: true}, nil
	case "bf16", "fp16", "int8", "offload":
		f, _ := ParseFormat(name)
		return Compression{To: f, MinBytes: DefaultMinBytes, Masks: true}, nil
	}
	return nil, fmt.Errorf("unknown compression policy %q (valid: %s)", name, strings.Join(Compressions, ", "))
}

// CompressStats describes what Compress did.
type CompressStats struct {
	Saved      int        // forward values the backward reads
	Tensors    [6]int     // how many of them are stored in each format
	MaskedBits int        // ReLU backwards switched to bit masks
	Before     int64      // bytes of the compressed values as produced
	After      int64      // device bytes they are stored in
	Choices    []Decision // per compressed value
}

// Decision is the storage chosen for one saved value.
type Decision struct {
	Value  *trace.Tensor // in the graph given to Compress
	Format Format
	Exact  bool // the format holds the value exactly
	Bits   bool // its ReLU masks are read from bits
}

func (s CompressStats) String() string {
	var parts []string
	for f, n := range s.Tensors {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, Format(f)))
		}
	}
	return fmt.Sprintf("%d saved tensors (%s), %d -> %d bytes", s.Saved, strings.Join(parts, ", "), s.Before, s.After)
}

// backwardReader reports whether n runs in the backward pass: a backward or
// update node, or a forward node recomputed for the backward pass.
func backwardReader(n *trace.Node) bool { return n.Phase != trace.Forward || n.Recompute }

// savedProducer reports whether n's outputs can be saved activations: a
// forward (not recomputed) op or step input.
func savedProducer(n *trace.Node) bool {
	return n.Phase == trace.Forward && !n.Recompute && (n.Kind == trace.KindOp || n.Kind == trace.KindInput)
}

// maskRead reports whether input i of n is a ReLU output read only as a
// mask: ReLU's backward reads its output (input 1) to test it for > 0, and
// so does LeakyReLU's with a slope >= 0 (prim.Unary's Grad).
func maskRead(n *trace.Node, i int) bool {
	if n.Kind != trace.KindOp || i != 1 {
		return false
	}
	b, ok := n.Op.(*prim.UnaryBackward)
	if !ok || !maskKind(b.Kind, b.C) {
		return false
	}
	src := n.Inputs[1]
	if src.Node.Kind != trace.KindOp || src.Index != 0 || n.Inputs[0] == src {
		return false
	}
	u, ok := src.Node.Op.(*prim.Unary)
	return ok && u.Kind == b.Kind && u.C == b.C
}

// maskKind reports whether an activation's backward reads its output only
// for its sign: ReLU, and LeakyReLU with a slope >= 0.
func maskKind(k prim.UnaryKind, c float64) bool {
	return k == prim.ReLUKind || k == prim.LeakyReLUKind && c >= 0
}

// leakySlope reports whether saved value v is a LeakyReLU output, and its
// slope: its mask must leave NaNs clear (prim.PackMask's Strict) and its
// backward scales by the slope.
func leakySlope(v *trace.Tensor) (float64, bool) {
	if v.Node.Kind != trace.KindOp {
		return 0, false
	}
	u, ok := v.Node.Op.(*prim.Unary)
	if !ok || u.Kind != prim.LeakyReLUKind {
		return 0, false
	}
	return u.C, true
}

// statistic reports whether t is an output its op declares a statistic
// (prim.Stats).
func statistic(t *trace.Tensor) bool {
	return t.Node.Kind == trace.KindOp && prim.TraitsOf(t.Node.Op).Stats.Statistic(t.Index)
}

// SavedValues lists the forward values of g that its backward pass reads,
// in the order they are produced.
func SavedValues(g *trace.Graph) []*Saved {
	outputs := map[*trace.Tensor]bool{}
	for _, t := range g.Outputs {
		outputs[t] = true
	}
	byValue := map[*trace.Tensor]*Saved{}
	var list []*Saved
	for _, n := range g.Nodes {
		if !backwardReader(n) {
			continue
		}
		// A reader counts once per value; it is a mask reader when all its
		// reads of the value are mask reads.
		seen := map[*trace.Tensor]bool{}
		for _, in := range n.Inputs {
			if !savedProducer(in.Node) || outputs[in] || seen[in] {
				continue
			}
			seen[in] = true
			s := byValue[in]
			if s == nil {
				s = &Saved{Value: in, Statistic: statistic(in)}
				byValue[in] = s
				list = append(list, s)
			}
			s.Readers = append(s.Readers, n)
			mask := true
			for j, in2 := range n.Inputs {
				if in2 == in && !maskRead(n, j) {
					mask = false
				}
			}
			if mask {
				s.MaskReaders++
			}
		}
	}
	sort.SliceStable(list, func(i, j int) bool {
		a, b := list[i].Value, list[j].Value
		return a.Node.ID < b.Node.ID || a.Node.ID == b.Node.ID && a.Index < b.Index
	})
	return list
}

// decide applies policy p to s and normalizes the answer to what applies.
func decide(p CompressPolicy, s *Saved) Decision {
	d := Decision{Value: s.Value, Format: p.Format(*s)}
	v := s.Value
	switch {
	case d.Format > Offload:
		d.Format = Keep
	case d.Format == Offload:
		d.Exact = true
	case v.DType() != tensor.Float32:
		d.Format = Keep
	case d.Format == Bits && s.MaskReaders == 0:
		d.Format = Keep
	}
	if lo := d.Format.lowDType(); lo != tensor.Invalid {
		if c, ok := v.Node.Op.(*prim.Cast); ok && v.Node.Kind == trace.KindOp && c.To == tensor.Float32 && v.Node.Inputs[0].DType() == lo {
			d.Exact = true
		} else if e, ok := p.(Exacter); ok && e.Exact(v, d.Format) {
			d.Exact = true
		}
	}
	d.Bits = s.MaskReaders > 0 && (d.Format == Bits || (d.Format != Keep && !d.Exact))
	return d
}

// Compress returns a copy of g in which the forward values that the
// backward pass reads are stored as policy p says: the compressing node
// (a cast to bfloat16 or float16, prim.Quantize, prim.PackMask) runs right
// after the value's producer, so the float32 original dies at its last
// forward reader, and the decompressing node (a cast back to float32,
// prim.Dequantize) runs just before the first backward reader, so the
// float32 copy lives only through the backward part that needs it. ReLU
// backwards whose mask is stored as bits become prim.ReLUBackwardMask. A
// value that is already the float32 image of a 16-bit tensor (a cast from
// bfloat16, as Autocast makes) is stored as that tensor, with no new node.
//
// Run it after Rematerialize (recomputed nodes are backward readers) and
// Autocast. Saved values that are graph outputs are left alone.
func Compress(g *trace.Graph, p CompressPolicy) (*trace.Graph, CompressStats, error) {
	var st CompressStats
	dec := map[*trace.Tensor]Decision{}
	for _, s := range SavedValues(g) {
		st.Saved++
		d := decide(p, s)
		st.Tensors[d.Format]++
		if d.Format == Keep {
			continue
		}
		dec[s.Value] = d
		st.Choices = append(st.Choices, d)
		st.Before += s.Bytes()
		switch {
		case d.Format == Bits:
			st.After += Bits.StoredBytes(s.Value.Shape())
			if !s.MaskOnly() {
				st.After += s.Bytes() // the other readers keep the original
			}
		default:
			st.After += d.Format.StoredBytes(s.Value.Shape())
			if d.Bits {
				st.After += Bits.StoredBytes(s.Value.Shape())
			}
		}
	}
	out := trace.New()
	mapped := map[*trace.Tensor]*trace.Tensor{}
	type storage struct {
		low, q, scale, bits, token *trace.Tensor // in out
		offload                    *prim.Offload
		restored                   *trace.Tensor // the float32 copy for the backward
	}
	store := map[*trace.Tensor]*storage{}
	err := trace.Capture(func() {
		for _, n := range g.Nodes {
			ins := make([]*trace.Tensor, len(n.Inputs))
			useMask := false
			for i, in := range n.Inputs {
				ins[i] = mapped[in]
				if ins[i] == nil {
					panic(&trace.ShapeError{Module: n.Module, Op: "compress", Err: fmt.Errorf("input %d (%v) of %s (node %d) has no mapping", i, in, n.Label(), n.ID)})
				}
				d, ok := dec[in]
				if !ok || !backwardReader(n) {
					continue
				}
				s := store[in]
				switch {
				case d.Bits && maskRead(n, i):
					useMask = true
				case d.Format == Bits:
					// Not a mask read: the original is kept for it.
				default:
					if s.restored == nil {
						s.restored = restore(out, in, d, s.low, s.q, s.scale, s.token, s.offload)
					}
					ins[i] = s.restored
				}
			}
			var outs []*trace.Tensor
			if useMask {
				st.MaskedBits++
				at(out, n.Module, n.Phase, func() {
					bm := &prim.ReLUBackwardMask{}
					if c, leaky := leakySlope(n.Inputs[1]); leaky {
						bm = &prim.ReLUBackwardMask{Leaky: true, Slope: c}
					}
					outs = []*trace.Tensor{prim.Apply1(bm, ins[0], store[n.Inputs[1]].bits)}
				})
			} else {
				outs = out.Clone(n, ins)
			}
			for i, o := range n.Outputs {
				mapped[o] = outs[i]
				d, ok := dec[o]
				if !ok {
					continue
				}
				s := &storage{}
				store[o] = s
				v := outs[i]
				at(out, n.Module, trace.Forward, func() {
					if d.Bits {
						if _, leaky := leakySlope(o); leaky {
							s.bits = prim.LeakyReLUMask(v)
						} else {
							s.bits = prim.ReLUMask(v)
						}
					}
					switch d.Format {
					case BF16, FP16:
						if d.Exact && v.Node.Kind == trace.KindOp {
							if c, ok := v.Node.Op.(*prim.Cast); ok && c.To == tensor.Float32 && v.Node.Inputs[0].DType() == d.Format.lowDType() {
								s.low = v.Node.Inputs[0]
								return
							}
						}
						s.low = prim.To(v, d.Format.lowDType())
					case Int8:
						s.q, s.scale = prim.QuantizeInt8(v)
					case Offload:
						s.offload = &prim.Offload{}
						s.token = prim.Apply1(s.offload, v)
					}
				})
			}
		}
		for i, t := range g.Outputs {
			out.Output(g.OutputNames[i], mapped[t])
		}
	})
	return out, st, err
}

// restore records the float32 copy of saved value v (of the input graph)
// from its stored form, as a backward node attributed to v's module.
func restore(g *trace.Graph, v *trace.Tensor, d Decision, low, q, scale, token *trace.Tensor, off *prim.Offload) *trace.Tensor {
	var r *trace.Tensor
	at(g, v.Node.Module, trace.Backward, func() {
		switch d.Format {
		case BF16, FP16:
			r = prim.To(low, tensor.Float32)
		case Int8:
			r = prim.DequantizeInt8(q, scale)
		case Offload:
			r = prim.Apply1(&prim.Reload{From: off, Meta: v.Meta}, token)
		}
	})
	return r
}

// at runs f with g recording nodes under module path module and phase p.
func at(g *trace.Graph, module string, p trace.Phase, f func()) {
	old := g.SetPhase(p)
	defer g.SetPhase(old)
	g.AtModule(module, f)
}
