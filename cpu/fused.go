package cpu

import (
	"fmt"
	"reflect"
	"sync"
	"unsafe"

	"github.com/headroom-ml/headroom/backend"
	blas "github.com/headroom-ml/headroom/cpu/internal/gemm"
	"github.com/headroom-ml/headroom/cpu/internal/vec"
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// Fused nodes (prim.Fused) run their producer's own kernel, then their
// elementwise program over the producer's output, a tile at a time: every
// value of a tile is computed from the tile of its operands while those are
// in L1, and only the program's outputs are stored. Each instruction is the
// unfused op's own loop (unaryRange, unaryBackwardRange, binaryRun) on the
// tile, so results are bit for bit those of the unfused graph.
//
// Where the producer has an epilogue hook (batch norm: fusedEpilogue), the
// program runs on each piece of output right after the producer wrote it,
// while it is still in cache; otherwise in a pass of its own after it.

func init() {
	Register[*prim.Fused](fusedKernel)
	RegisterWorkspace[*prim.Fused](func(n *trace.Node) int64 {
		o := n.Op.(*prim.Fused)
		if o.Producer == nil {
			return 0
		}
		p, err := fusedProducer(n)
		if err != nil {
			return 0
		}
		if o.Scratch() {
			return scratchAt(p) + 4*int64(o.Elems)
		}
		return Workspace(p)
	})
}

// A program computes a tile of elements of each value at once. The values
// it keeps in scratch (broadcast inputs, results that are not outputs)
// share fusedL1 bytes, so they stay in L1 while the tile's instructions
// run; tiles hold fusedMinTile to fusedMaxTile elements.
const (
	fusedL1      = 16 << 10
	fusedMinTile = 256
	fusedMaxTile = 4096
)

// scratchAt is where in a fused node's workspace the producer's output 0
// starts when no output of the program holds it (prim.Fused.Scratch):
// after the producer's own workspace, 64-byte aligned.
func scratchAt(p *trace.Node) int64 { return (Workspace(p) + 63) &^ 63 }

// fusedProducer is the node the producer's kernel runs as: the fused
// node's first inputs and the producer's outputs.
func fusedProducer(n *trace.Node) (*trace.Node, error) {
	o := n.Op.(*prim.Fused)
	p := &trace.Node{ID: n.ID, Kind: trace.KindOp, Op: o.Producer, Inputs: n.Inputs[:o.NProd],
		Module: n.Module, Phase: n.Phase, Region: n.Region, Recompute: n.Recompute}
	metas := make([]trace.Meta, o.NProd)
	for i, t := range p.Inputs {
		metas[i] = t.Meta
	}
	outs, err := o.Producer.Infer(metas)
	if err != nil {
		return nil, err
	}
	for i, m := range outs {
		p.Outputs = append(p.Outputs, &trace.Tensor{Node: p, Index: i, Meta: m})
	}
	return p, nil
}

// epilogueKernel is a producer's kernel that runs the program on each part
// of its output 0 as soon as it wrote it: it calls epi(lo, hi) for
// disjoint flat ranges covering output 0, possibly concurrently.
type epilogueKernel func(pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, ws []byte, epi func(lo, hi int)) error

// fusedEpilogue holds the producers' epilogue kernels, by op type.
var fusedEpilogue = map[reflect.Type]epilogueKernel{
	reflect.TypeFor[*prim.BatchNormOp](): func(pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, ws []byte, epi func(lo, hi int)) error {
		return dispatch(n, out[0].DType,
			func() error { return batchNorm[float32](pool, n, in, out, ws, epi) },
			func() error { return batchNorm[float64](pool, n, in, out, ws, epi) })
	},
}

func fusedKernel(pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, ws []byte) error {
	o := n.Op.(*prim.Fused)
	dt := tensor.Float32 // only 16-bit outputs: a float32 program
	if main := o.MainOut(); main >= 0 {
		dt = out[main].DType
	}
	return dispatch(n, dt,
		func() error { return fusedRun[float32](pool, n, o, in, out, ws) },
		func() error { return fusedRun[float64](pool, n, o, in, out, ws) })
}

func fusedRun[T Float](pool *parallel.Pool, n *trace.Node, o *prim.Fused, in, out []*tensor.Tensor, ws []byte) error {
	first := o.FirstInstr()
	// full[v] is value v whole where it is stored whole (producer output
	// 0, inputs read element for element); others are built per tile.
	full := make([][]T, first)
	var partial []int
	for i, l := range o.Loads {
		v := o.FirstLoad() + i
		if l.Full(o.Elems) && !narrow(in[o.NProd+l.Input].DType) {
			full[v] = slice[T](in[o.NProd+l.Input])[:o.Elems]
		} else {
			partial = append(partial, i)
		}
	}
	dst := make([][]T, len(o.Outs))
	dst16 := make([][]uint16, len(o.Outs)) // 16-bit values, stored narrowed
	for j, f := range o.Outs {
		switch {
		case f.Narrow:
			dst16[j] = out[j].U16()
		case f.Value >= first:
			dst[j] = slice[T](out[j])
		}
	}
	// borrowed is the output whose buffer holds the producer's output 0
	// when only the program reads it (-1: none).
	borrowed := -1
	if o.Producer != nil {
		borrowed = o.MainOut()
		for _, f := range o.Outs {
			if f.Value == 0 {
				borrowed = -1
			}
		}
	}
	// shares[j] lists the values stored in output j's memory: the
	// producer's output 0 when it is borrowed, an input the planner let
	// the output overwrite (prim.Fused.InPlaceInputs).
	shares := make([][]int, len(o.Outs))
	if borrowed >= 0 {
		shares[borrowed] = []int{0}
	}
	for j := range o.Outs {
		for v, s := range full[o.FirstLoad():] {
			if s != nil && dst[j] != nil && len(s) > 0 && &s[0] == &dst[j][0] {
				shares[j] = append(shares[j], o.FirstLoad()+v)
			}
		}
	}
	// An instruction whose result is an output writes it in place, unless
	// that would overwrite a value a later instruction of the tile reads;
	// the others go through a tile and are stored after the last.
	direct := make([]int, len(o.Prog))
	later := map[int]bool{} // values read after instruction i
	for i := len(o.Prog) - 1; i >= 0; i-- {
		direct[i] = -1
		for j, f := range o.Outs {
			if f.Value != first+i {
				continue
			}
			if f.Narrow {
				continue
			}
			direct[i] = j
			for _, v := range shares[j] {
				if later[v] {
					direct[i] = -1
				}
			}
		}
		for _, a := range o.Prog[i].Args {
			later[a] = true
		}
	}
	stored := make([]bool, len(o.Outs))
	for _, j := range direct {
		if j >= 0 {
			stored[j] = true
		}
	}
	run := make([]func(args [][]T, y []T), len(o.Prog))
	for i, ins := range o.Prog {
		run[i] = fusedInstr[T](ins.Op)
	}
	// A rounding to 16 bits whose value is an output narrows straight
	// into it (and widens back only if an instruction reads it): one
	// narrowing, as the unfused cast. A widening that is not stored
	// itself passes its operand on (16-bit values are held widened).
	narrowAt := make([]int, len(o.Prog))
	pass := make([]bool, len(o.Prog))
	read := map[int]bool{}
	for _, ins := range o.Prog {
		for _, a := range ins.Args {
			read[a] = true
		}
	}
	done16 := make([]bool, len(o.Outs))
	for i, ins := range o.Prog {
		narrowAt[i] = -1
		c, ok := ins.Op.(*prim.Cast)
		if !ok {
			continue
		}
		if c.To == tensor.Float32 {
			pass[i] = direct[i] < 0
			continue
		}
		for j, f := range o.Outs {
			if f.Narrow && f.Value == first+i && narrowAt[i] < 0 {
				narrowAt[i], done16[j] = j, true
			}
		}
	}
	extra := in[o.NProd:]
	grain := elemGrain
	for _, ins := range o.Prog {
		if !cheapElementwise(ins.Op) {
			grain = elemGrain / 16
		}
	}
	// Tiles as long as the scratch values of one still fit in L1
	// together: per-tile costs (calls, slicing) then vanish.
	scratch := len(partial)
	for _, j := range direct {
		if j < 0 {
			scratch++
		}
	}
	var z T
	tile := fusedL1 / int(unsafe.Sizeof(z)) / max(1, scratch)
	tile = max(fusedMinTile, min(fusedMaxTile, tile)) &^ 63
	bg, bgH, bgG := biasGeluProgram(o, in, out)
	if _, f32 := any(z).(float32); !f32 {
		bg = false
	}
	program := func(lo, hi int) {
		sc := getFusedScratch[T]((len(partial)+len(o.Prog))*tile, first+len(o.Prog))
		defer fusedScratches.Put(sc)
		buf, cur, args := sc.tiles, sc.cur, sc.args
		for t0 := lo; t0 < hi; t0 += tile {
			t1 := min(t0+tile, hi)
			w := t1 - t0
			if bg {
				// The same tiles, the bias loaded as below; a tile's
				// vector prefix in one pass, its tail (under 8) by the
				// instructions' own loops, as below.
				c, b := any(full[0][t0:t1]).([]float32), any(buf[:w]).([]float32)
				fillLoad(b, slice[float32](extra[o.Loads[0].Input]), o.Loads[0], t0)
				h, g := dst16[bgH][t0:t1], dst16[bgG][t0:t1]
				k := vec.BiasGELUBF16(c, b, h, g)
				if k < w {
					c, b, h, g = c[k:], b[k:], h[k:], g[k:]
					v := any(buf[tile : tile+len(c)]).([]float32)
					binaryRun(prim.AddKind, c, b, v)
					blas.NarrowBF16(h, v)
					blas.Widen(blas.BFloat16, v, h)
					geluF32(v, v)
					blas.NarrowBF16(g, v)
				}
				continue
			}
			for v, s := range full {
				if s != nil {
					cur[v] = s[t0:t1]
				}
			}
			for k, i := range partial {
				l := o.Loads[i]
				b := buf[k*tile:][:w]
				if x := extra[l.Input]; narrow(x.DType) {
					fillWiden(any(b).([]float32), x, l, t0)
				} else {
					fillLoad(b, slice[T](x), l, t0)
				}
				cur[o.FirstLoad()+i] = b
			}
			for i, ins := range o.Prog {
				if pass[i] {
					cur[first+i] = cur[ins.Args[0]]
					continue
				}
				var y []T
				if j := direct[i]; j >= 0 {
					y = dst[j][t0:t1]
				} else {
					y = buf[(len(partial)+i)*tile:][:w]
				}
				args = args[:0]
				for _, a := range ins.Args {
					args = append(args, cur[a])
				}
				cur[first+i] = y
				if j := narrowAt[i]; j >= 0 {
					d := dst16[j][t0:t1]
					narrowTile(out[j].DType, d, any(args[0]).([]float32))
					if read[first+i] {
						widenTile(out[j].DType, any(y).([]float32), d)
					}
					continue
				}
				run[i](args, y)
			}
			// The rest are stored last: the producer's output 0 may live
			// in an output's buffer, and every instruction of the tile
			// must have read it first.
			for j, f := range o.Outs {
				switch {
				case dst16[j] != nil && !done16[j]:
					narrowTile(out[j].DType, dst16[j][t0:t1], any(cur[f.Value]).([]float32))
				case dst[j] != nil && !stored[j]:
					copy(dst[j][t0:t1], cur[f.Value])
				}
			}
		}
	}
	if o.Producer == nil {
		pool.For(o.Elems, grain, program)
		return nil
	}
	p, err := fusedProducer(n)
	if err != nil {
		return err
	}
	pouts := make([]*tensor.Tensor, o.NProdOut)
	view := func(j, i int) *tensor.Tensor {
		m := p.Outputs[i].Meta
		return &tensor.Tensor{DType: m.DType, Shape: m.Shape, Data: out[j].Data}
	}
	for j, f := range o.Outs {
		if f.Value < o.NProdOut && pouts[f.Value] == nil {
			pouts[f.Value] = view(j, f.Value)
		}
	}
	switch {
	case borrowed >= 0:
		// Only the program reads output 0: the producer writes it into
		// the buffer of an output of the program, which the program then
		// overwrites tile by tile.
		pouts[0] = view(borrowed, 0)
	case o.Scratch():
		// Every output of the program's length is narrower: output 0
		// goes to the workspace.
		m := p.Outputs[0].Meta
		off := scratchAt(p)
		pouts[0] = &tensor.Tensor{DType: m.DType, Shape: m.Shape, Data: ws[off : off+int64(m.Bytes())]}
		ws = ws[:off]
	}
	for i, t := range pouts {
		if t == nil {
			return fmt.Errorf("cpu: %s: producer output %d has no buffer", n.Label(), i)
		}
	}
	full[0] = slice[T](pouts[0])[:o.Elems]
	if hook, ok := fusedEpilogue[reflect.TypeOf(o.Producer)]; ok {
		return hook(pool, p, in[:o.NProd], pouts, ws, program)
	}
	if err := runOn(pool, p, in[:o.NProd], pouts, ws); err != nil {
		return err
	}
	pool.For(o.Elems, grain, program)
	return nil
}

// biasGeluProgram reports whether o is bf16-mixed gpt's c_fc epilogue,
// which vec.BiasGELUBF16 runs in one pass (on AVX-512): value 0 plus a
// broadcast float32 row (bias), rounded to bfloat16 (output h), widened,
// gelu, rounded to bfloat16 (output g), both outputs narrow and nothing
// else; and the indexes of outputs h and g. The program's loops pass
// over a tile five times, the stores and loads between them costing
// about half as much as gelu.
func biasGeluProgram(o *prim.Fused, in, out []*tensor.Tensor) (ok bool, h, g int) {
	if !vec.BiasGELUBF16Enabled() || o.Producer == nil || len(o.Loads) != 1 || len(o.Prog) != 5 || len(o.Outs) != 2 {
		return false, 0, 0
	}
	l, fi, fl := o.Loads[0], o.FirstInstr(), o.FirstLoad()
	if l.Inner != 1 || in[o.NProd+l.Input].DType != tensor.Float32 || out[0].DType != tensor.BFloat16 || out[1].DType != tensor.BFloat16 {
		return false, 0, 0
	}
	arg := func(i, a int) bool { return len(o.Prog[i].Args) == 1 && o.Prog[i].Args[0] == a }
	cast := func(i int, to tensor.DType) bool {
		c, ok := o.Prog[i].Op.(*prim.Cast)
		return ok && c.To == to && arg(i, fi+i-1)
	}
	add, ok := o.Prog[0].Op.(*prim.Binary)
	if !ok || add.Kind != prim.AddKind || len(o.Prog[0].Args) != 2 {
		return false, 0, 0
	}
	if a := o.Prog[0].Args; !(a[0] == 0 && a[1] == fl || a[0] == fl && a[1] == 0) {
		return false, 0, 0
	}
	gelu, ok := o.Prog[3].Op.(*prim.Unary)
	if !ok || gelu.Kind != prim.GELUKind || !arg(3, fi+2) || !cast(1, tensor.BFloat16) || !cast(2, tensor.Float32) || !cast(4, tensor.BFloat16) {
		return false, 0, 0
	}
	h, g = -1, -1
	for j, f := range o.Outs {
		switch {
		case !f.Narrow:
			return false, 0, 0
		case f.Value == fi+1:
			h = j
		case f.Value == fi+4:
			g = j
		}
	}
	return h >= 0 && g >= 0, h, g
}

// narrow reports whether d is a 16-bit type a float32 program holds
// widened.
func narrow(d tensor.DType) bool { return d == tensor.BFloat16 || d == tensor.Float16 }

// fillWiden writes elements [t0, t0+len(b)) of load l of 16-bit src into
// b, widened as castKernel widens.
func fillWiden(b []float32, src *tensor.Tensor, l prim.FusedLoad, t0 int) {
	s := src.U16()
	widen := func(y []float32, x []uint16) {
		if src.DType == tensor.BFloat16 {
			blas.Widen(blas.BFloat16, y, x)
			return
		}
		for i, v := range x {
			y[i] = tensor.Float16ToFloat32(v)
		}
	}
	if l.Inner == 1 {
		k := t0 % l.Mid
		for len(b) > 0 {
			c := min(len(b), l.Mid-k)
			widen(b[:c], s[k:k+c])
			b, k = b[c:], 0
		}
		return
	}
	for i := t0; len(b) > 0; {
		m := min(l.Inner-i%l.Inner, len(b))
		var v [1]float32
		widen(v[:], s[(i/l.Inner)%l.Mid:][:1])
		for x := range b[:m] {
			b[x] = v[0]
		}
		b, i = b[m:], i+m
	}
}

// narrowTile stores float32 values x as 16-bit type to into y, as
// castKernel narrows.
func narrowTile(to tensor.DType, y []uint16, x []float32) {
	if to == tensor.BFloat16 {
		blas.NarrowBF16(y, x)
		return
	}
	for i, v := range x {
		y[i] = tensor.Float32ToFloat16(v)
	}
}

// widenTile sets y to the 16-bit values x of type from, as castKernel
// widens.
func widenTile(from tensor.DType, y []float32, x []uint16) {
	if from == tensor.BFloat16 {
		blas.Widen(blas.BFloat16, y, x)
		return
	}
	for i, v := range x {
		y[i] = tensor.Float16ToFloat32(v)
	}
}

// fillLoad writes elements [t0, t0+len(b)) of load l of src into b.
func fillLoad[T Float](b, src []T, l prim.FusedLoad, t0 int) {
	if l.Inner == 1 {
		k := t0 % l.Mid
		for len(b) > 0 {
			c := copy(b, src[k:l.Mid])
			b, k = b[c:], 0
		}
		return
	}
	for i := t0; len(b) > 0; {
		m := min(l.Inner-i%l.Inner, len(b))
		v := src[(i/l.Inner)%l.Mid]
		for x := range b[:m] {
			b[x] = v
		}
		b, i = b[m:], i+m
	}
}

// fusedInstr returns the loop of one instruction over a tile: the unfused
// kernel's own. y may be one of the operands (elementwise, in place).
func fusedInstr[T Float](o trace.Op) func(args [][]T, y []T) {
	switch o := o.(type) {
	case *prim.Unary:
		return func(args [][]T, y []T) { unaryRange(o, args[0], y) }
	case *prim.UnaryBackward:
		return func(args [][]T, y []T) { unaryBackwardRange(o, args[0], args[1], y) }
	case *prim.Binary:
		return func(args [][]T, y []T) { binaryRun(o.Kind, args[0], args[1], y) }
	case *prim.Round:
		// float32 only (prim.Round.Infer).
		return func(args [][]T, y []T) { roundTile(o.To, any(y).([]float32), any(args[0]).([]float32)) }
	case *prim.Cast:
		// float32 programs only (prim.Fused.Infer): 16-bit values are
		// held widened, so a narrowing rounds and a widening copies.
		if o.To == tensor.Float32 {
			return func(args [][]T, y []T) { copy(y, args[0]) }
		}
		return func(args [][]T, y []T) { roundTile(o.To, any(y).([]float32), any(args[0]).([]float32)) }
	}
	panic(fmt.Sprintf("cpu: %s is not a fused instruction", o.Name()))
}

// cheapElementwise reports whether o costs about a load and a store per
// element (no transcendental functions), for parallel grains.
func cheapElementwise(o trace.Op) bool {
	switch o := o.(type) {
	case *prim.Binary, *prim.Round, *prim.Cast:
		return true
	case *prim.Unary:
		switch o.Kind {
		case prim.NegKind, prim.ReLUKind, prim.ScaleKind, prim.AddConstKind, prim.SquareKind, prim.LeakyReLUKind, prim.AbsKind:
			return true
		}
	case *prim.UnaryBackward:
		switch o.Kind {
		case prim.ReLUKind, prim.TanhKind, prim.SigmoidKind, prim.LeakyReLUKind:
			return true
		}
	}
	return false
}

// fusedScratch is what one call of a program works in: its tiles and the
// current tile of each value. Epilogues call programs on small parts of
// an output, many times per node, so it is pooled.
type fusedScratch[T Float] struct {
	tiles []T
	cur   [][]T
	args  [][]T
}

var fusedScratches sync.Pool // *fusedScratch[T], by element type

func getFusedScratch[T Float](tiles, vals int) *fusedScratch[T] {
	sc, ok := fusedScratches.Get().(*fusedScratch[T])
	if !ok {
		sc = &fusedScratch[T]{args: make([][]T, 0, 2)}
	}
	if len(sc.tiles) < tiles {
		sc.tiles = make([]T, tiles)
	}
	if len(sc.cur) < vals {
		sc.cur = make([][]T, vals)
	}
	return sc
}

// NonFinite finds the first NaN or infinity in a tensor: its flat index
// and value.
type NonFinite = backend.NonFinite

// RunFusedChecked runs fused node n as the nodes it replaced, one after
// the other, each value in memory of its own, and checks each value with
// bad as it is made. It writes n's outputs as Run does, unless a value is
// not finite: then it returns a node standing for the op that made it (its
// op, module, phase and output metadata), the output's index and bad's
// findings. A diagnosis run (exec.Options.CheckFinite) uses it to name the
// op and module that produced a NaN even where it was fused with others.
func RunFusedChecked(n *trace.Node, in, out []*tensor.Tensor, ws []byte, bad NonFinite) (culprit *trace.Node, output, index int, value float64, err error) {
	return runFusedChecked(nil, n, in, out, ws, bad)
}

// runFusedChecked is RunFusedChecked with the loops on pool.
func runFusedChecked(pool *parallel.Pool, n *trace.Node, in, out []*tensor.Tensor, ws []byte, bad NonFinite) (culprit *trace.Node, output, index int, value float64, err error) {
	o := n.Op.(*prim.Fused)
	j := o.MainOut()
	c := &fusedCheck{n: n, o: o, bad: bad}
	dt := tensor.Float32 // only 16-bit outputs: a float32 program
	if j >= 0 {
		dt = out[j].DType
	}
	err = dispatch(n, dt,
		func() error { return fusedChecked[float32](pool, c, in, out, ws) },
		func() error { return fusedChecked[float64](pool, c, in, out, ws) })
	return c.culprit, c.output, c.index, c.value, err
}

type fusedCheck struct {
	n       *trace.Node
	o       *prim.Fused
	bad     NonFinite
	culprit *trace.Node
	output  int
	index   int
	value   float64
}

// found reports whether t holds a non-finite value, recording it as
// output i of node m.
func (c *fusedCheck) found(m *trace.Node, i int, t *tensor.Tensor) bool {
	k, v, b := c.bad(t)
	if b {
		c.culprit, c.output, c.index, c.value = m, i, k, v
	}
	return b
}

func fusedChecked[T Float](pool *parallel.Pool, c *fusedCheck, in, out []*tensor.Tensor, ws []byte) error {
	n, o := c.n, c.o
	vals := make([][]T, o.FirstInstr()+len(o.Prog))
	var dt tensor.DType
	if o.Producer != nil {
		p, err := fusedProducer(n)
		if err != nil {
			return err
		}
		pouts := make([]*tensor.Tensor, o.NProdOut)
		for i, t := range p.Outputs {
			pouts[i] = tensor.New(t.Meta.DType, t.Meta.Shape)
		}
		if err := runOn(pool, p, in[:o.NProd], pouts, ws); err != nil {
			return err
		}
		for i, t := range pouts {
			if c.found(p, i, t) {
				return nil
			}
		}
		for j, f := range o.Outs {
			if f.Value < o.NProdOut {
				copy(out[j].Data, pouts[f.Value].Data)
			}
		}
		vals[0], dt = slice[T](pouts[0]), pouts[0].DType
	}
	for i, l := range o.Loads {
		x := in[o.NProd+l.Input]
		v := make([]T, o.Elems)
		if narrow(x.DType) {
			fillWiden(any(v).([]float32), x, l, 0)
		} else {
			fillLoad(v, slice[T](x), l, 0)
			dt = x.DType
		}
		vals[o.FirstLoad()+i] = v
	}
	if dt == tensor.Invalid {
		dt = tensor.Float32 // 16-bit loads only: a float32 program
	}
	for i, ins := range o.Prog {
		shape := ins.Shape
		if shape.NumElements() != o.Elems {
			shape = tensor.Shape{o.Elems}
		}
		t := tensor.New(dt, shape)
		y := slice[T](t)
		args := make([][]T, len(ins.Args))
		for j, a := range ins.Args {
			args[j] = vals[a]
		}
		fusedInstr[T](ins.Op)(args, y)
		vals[o.FirstInstr()+i] = y
		m := &trace.Node{ID: n.ID, Kind: trace.KindOp, Op: ins.Op, Module: ins.Module, Phase: n.Phase, Region: n.Region, Recompute: n.Recompute}
		mdt := dt
		if c, ok := ins.Op.(*prim.Cast); ok {
			mdt = c.To // (a 16-bit value checked widened: the same infinities and NaNs)
		}
		m.Outputs = []*trace.Tensor{{Node: m, Meta: trace.Meta{DType: mdt, Shape: shape}}}
		if c.found(m, 0, t) {
			return nil
		}
	}
	for j, f := range o.Outs {
		switch {
		case f.Narrow:
			narrowTile(out[j].DType, out[j].U16(), any(vals[f.Value]).([]float32))
		case f.Value >= o.FirstInstr():
			copy(slice[T](out[j]), vals[f.Value])
		}
	}
	return nil
}
