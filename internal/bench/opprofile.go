package bench

import (
	"fmt"
	"io"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// DefaultOpShapes is how many input shapes an op profile by shapes lists
// under each op: the few that take the time, with a line for the rest.
const DefaultOpShapes = 5

// opProfile sums node times over the timed steps, per node: a compiled
// step runs the same nodes every step, so a map lookup per call is all the
// observer costs, and the grouping by op name (and phase) or by input
// shapes, which formats strings, happens once, in write.
type opProfile struct {
	shapes int // input shapes listed per op; 0: none
	nodes  map[*trace.Node]*nodeTime
	// est, if set, is the planner's estimate of a node's seconds
	// (budget.CostModel.Node), printed beside each op's measured time so
	// that the cost model can be checked op by op against the kernels.
	est func(*trace.Node) float64
}

type nodeTime struct {
	calls int
	d     time.Duration
}

func newOpProfile(shapes int) *opProfile {
	return &opProfile{shapes: max(0, shapes), nodes: map[*trace.Node]*nodeTime{}}
}

func (p *opProfile) observe(_ int, n *trace.Node, d time.Duration) {
	t := p.nodes[n]
	if t == nil {
		t = &nodeTime{}
		p.nodes[n] = t
	}
	t.calls++
	t.d += d
}

// profRow is a line of the table: an op (and phase), or one input shape
// of its calls.
type profRow struct {
	key    string
	calls  int
	d      time.Duration
	est    float64   // seconds, over all calls (opProfile.est)
	shapes []profRow // an op's, longest first
}

// rows groups the nodes by op and phase and, with p.shapes, each op's by
// input shapes; longest first (ties by name, so that the table is stable).
func (p *opProfile) rows() (ops []profRow, sum time.Duration, est float64) {
	type group struct {
		row    profRow
		shapes map[string]*profRow
	}
	byOp := map[string]*group{}
	for n, t := range p.nodes {
		k := n.Op.Name() + " (" + n.Phase.String() + ")"
		g := byOp[k]
		if g == nil {
			g = &group{row: profRow{key: k}, shapes: map[string]*profRow{}}
			byOp[k] = g
		}
		g.row.calls += t.calls
		g.row.d += t.d
		sum += t.d
		var e float64
		if p.est != nil {
			e = p.est(n) * float64(t.calls)
		}
		g.row.est += e
		est += e
		if p.shapes > 0 {
			sk := describeCall(n)
			r := g.shapes[sk]
			if r == nil {
				r = &profRow{key: sk}
				g.shapes[sk] = r
			}
			r.calls += t.calls
			r.d += t.d
			r.est += e
		}
	}
	for _, g := range byOp {
		for _, r := range g.shapes {
			g.row.shapes = append(g.row.shapes, *r)
		}
		sortRows(g.row.shapes)
		ops = append(ops, g.row)
	}
	sortRows(ops)
	return ops, sum, est
}

func sortRows(rs []profRow) {
	sort.Slice(rs, func(i, j int) bool {
		if rs[i].d != rs[j].d {
			return rs[i].d > rs[j].d
		}
		return rs[i].key < rs[j].key
	})
}

func (p *opProfile) write(w io.Writer, steps int) {
	ops, sum, est := p.rows()
	steps = max(1, steps)
	perStep := func(d time.Duration) string { return FormatSeconds(d.Seconds() / float64(steps)) }
	pct := func(d time.Duration) float64 { return 100 * float64(d) / float64(max(1, sum)) }
	head := "time per step by op"
	if p.shapes > 0 {
		head += " and input shapes"
	}
	estimate := func(e float64) string {
		if p.est == nil {
			return ""
		}
		return fmt.Sprintf("  estimated %10s %5.1f%%", FormatSeconds(e/float64(steps)), 100*e/max(est, 1e-300))
	}
	var total string
	if p.est != nil {
		// The cost model ranks plans, it does not promise seconds: its
		// shares are the figures to compare with the measured ones.
		total = ", the planner's cost model " + FormatSeconds(est/float64(steps))
	}
	fmt.Fprintf(w, "  %s (kernels only, %s per step in all%s):\n", head, perStep(sum), total)
	// A shape's figures come first, in columns, and its description,
	// which can be long, last.
	const shapeLine = "      %6d calls %10s %5.1f%%  %s\n"
	for _, r := range ops {
		fmt.Fprintf(w, "    %-40s %6d calls %10s %5.1f%%%s\n", r.key, r.calls/steps, perStep(r.d), pct(r.d), estimate(r.est))
		if p.shapes == 0 {
			continue
		}
		for i, s := range r.shapes {
			if i == p.shapes {
				var rest profRow
				for _, s := range r.shapes[i:] {
					rest.calls += s.calls
					rest.d += s.d
				}
				fmt.Fprintf(w, shapeLine, rest.calls/steps, perStep(rest.d), pct(rest.d), moreShapes(len(r.shapes)-i))
				break
			}
			fmt.Fprintf(w, shapeLine, s.calls/steps, perStep(s.d), pct(s.d), s.key)
		}
	}
}

func moreShapes(k int) string {
	if k == 1 {
		return "… 1 more shape"
	}
	return fmt.Sprintf("… %d more shapes", k)
}

// describeCall names what a kernel call was given: the dtypes and shapes
// of its inputs, what a matrix product multiplies (M×N×K), and the op's
// parameters (transposes, strides, padding). A fused node is described by
// its producer (the product or convolution whose epilogue it runs), then
// "+" and the inputs its epilogue reads.
func describeCall(n *trace.Node) string {
	op, ins := n.Op, n.Inputs
	var epilogue []*trace.Tensor
	if f, ok := op.(*prim.Fused); ok {
		op = nil // its fields say how the chain runs, not what it is given
		if f.Producer != nil && f.NProd <= len(ins) {
			op, ins, epilogue = f.Producer, ins[:f.NProd], ins[f.NProd:]
		}
	}
	var b strings.Builder
	writeMetas(&b, ins)
	if mm, ok := op.(*prim.MatMul); ok && len(ins) >= 2 {
		if batch, m, k, nn, err := mm.Dims(ins[0].Meta.Shape, ins[1].Meta.Shape); err == nil {
			fmt.Fprintf(&b, " M×N×K=%d×%d×%d", m, nn, k)
			if len(batch) > 0 {
				fmt.Fprintf(&b, " batch=%d", batch.NumElements())
			}
		}
	}
	if op != nil {
		if a := opAttrs(op); a != "" {
			b.WriteByte(' ')
			b.WriteString(a)
		}
	}
	if len(epilogue) > 0 {
		b.WriteString(" + ")
		writeMetas(&b, epilogue)
	}
	return b.String()
}

func writeMetas(b *strings.Builder, ts []*trace.Tensor) {
	for i, t := range ts {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(shortMeta(t.Meta))
	}
}

var shortDType = map[tensor.DType]string{
	tensor.Float32: "f32", tensor.Float64: "f64", tensor.Float16: "f16", tensor.BFloat16: "bf16",
	tensor.Int32: "i32", tensor.Int64: "i64", tensor.Uint8: "u8",
}

func shortMeta(m trace.Meta) string {
	d, ok := shortDType[m.DType]
	if !ok {
		d = m.DType.String()
	}
	return d + shapeString(m.Shape)
}

func shapeString(s []int) string {
	parts := make([]string, len(s))
	for i, v := range s {
		parts[i] = strconv.Itoa(v)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// unitDefault are parameters whose value 1 is their default, left out as
// zero values are.
var unitDefault = map[string]bool{"Stride": true, "Dilation": true, "Groups": true}

// opAttrs lists an op's set parameters, from its exported fields of plain
// kinds (nested structs flattened): "TransB Mixed", "Stride=2 Padding=1".
// Fields that are pointers, interfaces, funcs or maps (fused ops'
// innards) are left out: the line is a key, not a dump.
func opAttrs(op trace.Op) string {
	v := reflect.ValueOf(op)
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return ""
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return ""
	}
	var out []string
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		t := v.Type()
		for i := range t.NumField() {
			f, fv := t.Field(i), v.Field(i)
			if !f.IsExported() {
				continue
			}
			if st, ok := fv.Interface().(fmt.Stringer); ok && (fv.CanInt() || fv.CanUint()) && !fv.IsZero() {
				// An enum (a dtype, a unary op's kind) by its name.
				out = append(out, f.Name+"="+st.String())
				continue
			}
			switch fv.Kind() {
			case reflect.Struct:
				walk(fv)
			case reflect.Bool:
				if fv.Bool() {
					out = append(out, f.Name)
				}
			case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
				if fv.Type().PkgPath() != "" {
					// An enum without names (a unary op's kind): its
					// number says nothing the op's name does not.
					continue
				}
				if x := fv.Int(); x != 0 && !(x == 1 && unitDefault[f.Name]) {
					out = append(out, f.Name+"="+strconv.FormatInt(x, 10))
				}
			case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
				if fv.Type().PkgPath() != "" {
					continue // an enum without names, as above
				}
				if x := fv.Uint(); x != 0 {
					out = append(out, f.Name+"="+strconv.FormatUint(x, 10))
				}
			case reflect.Float32, reflect.Float64:
				if x := fv.Float(); x != 0 {
					out = append(out, f.Name+"="+strconv.FormatFloat(x, 'g', -1, 64))
				}
			case reflect.String:
				if s := fv.String(); s != "" {
					out = append(out, f.Name+"="+s)
				}
			case reflect.Array, reflect.Slice:
				if s, ok := intList(fv, unitDefault[f.Name]); ok {
					out = append(out, f.Name+"="+s)
				}
			}
		}
	}
	walk(v)
	return strings.Join(out, " ")
}

// intList formats a short list of integers (a shape, strides), as one
// number when all are equal; ok is false for an empty, long, non-integer
// or default one (all zeros, or all ones where one is the default).
func intList(v reflect.Value, unit bool) (s string, ok bool) {
	if v.Len() == 0 || v.Len() > 8 {
		return "", false
	}
	switch v.Type().Elem().Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
	default:
		return "", false
	}
	xs := make([]int, v.Len())
	same := true
	for i := range xs {
		xs[i] = int(v.Index(i).Int())
		same = same && xs[i] == xs[0]
	}
	if same && (xs[0] == 0 || xs[0] == 1 && unit) {
		return "", false
	}
	if same && v.Kind() == reflect.Array {
		return strconv.Itoa(xs[0]), true
	}
	return shapeString(xs), true
}
