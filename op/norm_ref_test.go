package op_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"testing"

	"github.com/headroom-ml/headroom/autodiff"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/exec"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/safetensors"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// Reference values come from scripts/reference/ops_norm.py (PyTorch 1.13,
// float32); testdata/norm.safetensors is committed so this test needs no
// Python. The case table is the file's "configs" metadata.
const normRefPath = "testdata/norm.safetensors"

// Tolerances for float32 values, |got-want| <= atol + rtol*|want|. The
// kernels accumulate in float64, PyTorch partly in float32, so values
// agree to a few float32 ulps. Cases marked ref64 (ill-conditioned: two
// values per group) are held to these tolerances against a float64
// PyTorch reference, and to normRefAtol64 against PyTorch's float32 result,
// which is itself that far from the exact value.
const (
	normRefRtol   = 1e-5
	normRefAtol   = 1e-6
	normRefAtol64 = 2e-4
)

// normRefCases must all be in the file (the file may have more; all run).
var normRefCases = []string{
	"bn_train_nchw", "bn_train_nc", "bn_train_ncl", "bn_train_noaffine", "bn_train_notrack", "bn_train_wide",
	"bn_eval_nchw", "bn_eval_nc", "bn_eval_noaffine",
	"ln_last1", "ln_last2", "ln_noaffine", "ln_wide", "ln_all",
	"gn_g1", "gn_g2", "gn_g3", "gn_g6", "gn_noaffine", "gn_ncl", "gn_nc",
	"emb_plain", "emb_padding", "emb_padding_neg", "emb_3d",
}

type normRefConfig struct {
	Kind string `json:"kind"`
	// batch, layer and group norm
	Shape    []int   `json:"shape"`
	Affine   bool    `json:"affine"`
	Eps      float64 `json:"eps"`
	Track    bool    `json:"track"`
	Training bool    `json:"training"`
	Momentum float64 `json:"momentum"`
	Steps    int     `json:"steps"`
	// layer norm
	Normalized []int `json:"normalized"`
	// group norm
	Groups int `json:"groups"`
	// embedding
	Num          int   `json:"num"`
	Dim          int   `json:"dim"`
	IndicesShape []int `json:"indices_shape"`
	PaddingIdx   *int  `json:"padding_idx"`
	// Ref64 cases also store a float64 reference for gx ("gx64").
	Ref64 bool `json:"ref64"`
}

type normRef struct {
	tensors map[string]*tensor.Tensor
	configs map[string]normRefConfig
}

func normLoadRef(t *testing.T) *normRef {
	t.Helper()
	f, err := safetensors.ReadFile(normRefPath)
	if err != nil {
		t.Fatal(err)
	}
	r := &normRef{tensors: map[string]*tensor.Tensor{}}
	for _, n := range f.Names() {
		if r.tensors[n], err = f.Tensor(n); err != nil {
			t.Fatal(err)
		}
	}
	if err := json.Unmarshal([]byte(f.Metadata["configs"]), &r.configs); err != nil {
		t.Fatalf("%s: metadata configs: %v", normRefPath, err)
	}
	return r
}

// get returns the named tensor of a case (t.Fatal if absent).
func (r *normRef) get(t *testing.T, cas, name string) *tensor.Tensor {
	t.Helper()
	x, ok := r.tensors[cas+"."+name]
	if !ok {
		t.Fatalf("%s: no tensor %s.%s", normRefPath, cas, name)
	}
	return x
}

// normClose compares float32 tensors elementwise with the default
// tolerances.
func normClose(t *testing.T, what string, got, want *tensor.Tensor) {
	t.Helper()
	normCloseTol(t, what, got, want, normRefRtol, normRefAtol)
}

func normCloseTol(t *testing.T, what string, got, want *tensor.Tensor, rtol, atol float64) {
	t.Helper()
	if got.DType != want.DType || !got.Shape.Equal(want.Shape) {
		t.Errorf("%s: got %v%v, want %v%v", what, got.DType, got.Shape, want.DType, want.Shape)
		return
	}
	g, w := got.Float64s(), want.Float64s()
	bad, worst, at := 0, 0.0, 0
	for i := range g {
		d := math.Abs(g[i] - w[i])
		if d > atol+rtol*math.Abs(w[i]) || math.IsNaN(g[i]) != math.IsNaN(w[i]) {
			bad++
		}
		if r := d / (atol + rtol*math.Abs(w[i])); r > worst || math.IsNaN(d) {
			worst, at = r, i
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d elements differ; worst at %d: got %.9g, want %.9g (%.3g × tolerance)", what, bad, len(g), at, g[at], w[at], worst)
	}
}

// normProgram traces build (which declares inputs and states and marks
// outputs) and compiles it for the cpu.
func normProgram(t *testing.T, build func(g *trace.Graph)) *exec.Program {
	t.Helper()
	g := trace.New()
	if err := trace.Capture(func() { build(g) }); err != nil {
		t.Fatal(err)
	}
	p, err := exec.Compile(g, device.CPU())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// normRun runs one step of p with states bound by name (exec.StateMap:
// running statistics are updated in place in those host tensors).
func normRun(t *testing.T, p *exec.Program, states exec.StateMap, feed map[string]*tensor.Tensor) map[string]*tensor.Tensor {
	t.Helper()
	arena := exec.NewArena(p.Device)
	defer arena.Release()
	res, err := p.Run(context.Background(), arena, states, feed, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// normBackward records the gradients of out (seeded by an input "gy") with
// respect to wrt, as outputs named by names (nil entries are skipped).
func normBackward(g *trace.Graph, out *trace.Tensor, wrt []*trace.Tensor, names []string) {
	gy := g.Input("gy", out.DType(), out.Shape())
	var ws []*trace.Tensor
	var ns []string
	for i, w := range wrt {
		if w != nil {
			ws = append(ws, w)
			ns = append(ns, names[i])
		}
	}
	grads, err := autodiff.BackwardFrom(out, gy, ws)
	if err != nil {
		panic(err)
	}
	g.Output("y", out)
	for i, gr := range grads {
		g.Output(ns[i], gr)
	}
}

func TestNormReference(t *testing.T) {
	r := normLoadRef(t)
	for _, name := range normRefCases {
		if _, ok := r.configs[name]; !ok {
			t.Errorf("%s: case %s is missing; regenerate with scripts/reference/ops_norm.py", normRefPath, name)
		}
	}
	names := make([]string, 0, len(r.configs))
	for n := range r.configs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		c := r.configs[name]
		t.Run(name, func(t *testing.T) {
			switch c.Kind {
			case "batch_norm":
				normRefBatchNorm(t, r, name, c)
			case "layer_norm", "group_norm":
				normRefLayerGroup(t, r, name, c)
			case "embedding":
				normRefEmbedding(t, r, name, c)
			default:
				t.Fatalf("unknown kind %q", c.Kind)
			}
		})
	}
}

func normRefBatchNorm(t *testing.T, r *normRef, name string, c normRefConfig) {
	f32 := tensor.Float32
	shape := tensor.Shape(c.Shape)
	ch := tensor.Shape{shape[1]}
	p := normProgram(t, func(g *trace.Graph) {
		x := g.Input("x", f32, shape)
		var w, b, rm, rv *trace.Tensor
		if c.Affine {
			w, b = g.Input("weight", f32, ch), g.Input("bias", f32, ch)
		}
		if c.Track {
			rm = g.State("running_mean", "buffer", f32, ch)
			rv = g.State("running_var", "buffer", f32, ch)
		}
		y := op.BatchNorm(x, w, b, rm, rv, c.Training, c.Momentum, c.Eps)
		if c.Track && c.Training {
			op.IncrementCounter(g.State("num_batches_tracked", "buffer", tensor.Int64, tensor.Shape{}))
		}
		normBackward(g, y, []*trace.Tensor{x, w, b}, []string{"gx", "gw", "gb"})
	})
	states := exec.StateMap{}
	if c.Track {
		states["running_mean"] = r.get(t, name, "running_mean0").Clone()
		states["running_var"] = r.get(t, name, "running_var0").Clone()
		states["num_batches_tracked"] = tensor.New(tensor.Int64, tensor.Shape{})
	}
	for step := 1; step <= c.Steps; step++ {
		s := fmt.Sprint(step)
		feed := map[string]*tensor.Tensor{"x": r.get(t, name, "x"+s), "gy": r.get(t, name, "gy"+s)}
		if c.Affine {
			feed["weight"], feed["bias"] = r.get(t, name, "weight"), r.get(t, name, "bias")
		}
		res := normRun(t, p, states, feed)
		normClose(t, "step "+s+" y", res["y"], r.get(t, name, "y"+s))
		normClose(t, "step "+s+" grad x", res["gx"], r.get(t, name, "gx"+s))
		if c.Affine {
			normClose(t, "step "+s+" grad weight", res["gw"], r.get(t, name, "gw"+s))
			normClose(t, "step "+s+" grad bias", res["gb"], r.get(t, name, "gb"+s))
		}
		if c.Track {
			normClose(t, "step "+s+" running_mean", states["running_mean"], r.get(t, name, "running_mean"+s))
			normClose(t, "step "+s+" running_var", states["running_var"], r.get(t, name, "running_var"+s))
			got, want := states["num_batches_tracked"], r.get(t, name, "num_batches_tracked"+s)
			if want.DType != tensor.Int64 || got.I64()[0] != want.I64()[0] {
				t.Errorf("step %d num_batches_tracked: got %v, want %v", step, got.Float64s(), want.Float64s())
			}
		}
	}
}

func normRefLayerGroup(t *testing.T, r *normRef, name string, c normRefConfig) {
	f32 := tensor.Float32
	shape := tensor.Shape(c.Shape)
	pshape := tensor.Shape{shape[1]}
	if c.Kind == "layer_norm" {
		pshape = tensor.Shape(c.Normalized)
	}
	p := normProgram(t, func(g *trace.Graph) {
		x := g.Input("x", f32, shape)
		var w, b *trace.Tensor
		if c.Affine {
			w, b = g.Input("weight", f32, pshape), g.Input("bias", f32, pshape)
		}
		var y *trace.Tensor
		if c.Kind == "layer_norm" {
			y = op.LayerNorm(x, pshape, w, b, c.Eps)
		} else {
			y = op.GroupNorm(x, c.Groups, w, b, c.Eps)
		}
		normBackward(g, y, []*trace.Tensor{x, w, b}, []string{"gx", "gw", "gb"})
	})
	feed := map[string]*tensor.Tensor{"x": r.get(t, name, "x"), "gy": r.get(t, name, "gy")}
	if c.Affine {
		feed["weight"], feed["bias"] = r.get(t, name, "weight"), r.get(t, name, "bias")
	}
	res := normRun(t, p, exec.StateMap{}, feed)
	normClose(t, "y", res["y"], r.get(t, name, "y"))
	if c.Ref64 {
		normClose(t, "grad x vs float64", res["gx"], r.get(t, name, "gx64").Convert(tensor.Float32))
		normCloseTol(t, "grad x vs float32", res["gx"], r.get(t, name, "gx"), normRefRtol, normRefAtol64)
	} else {
		normClose(t, "grad x", res["gx"], r.get(t, name, "gx"))
	}
	if c.Affine {
		normClose(t, "grad weight", res["gw"], r.get(t, name, "gw"))
		normClose(t, "grad bias", res["gb"], r.get(t, name, "gb"))
	}
}

func normRefEmbedding(t *testing.T, r *normRef, name string, c normRefConfig) {
	idx, w := r.get(t, name, "indices"), r.get(t, name, "weight")
	p := normProgram(t, func(g *trace.Graph) {
		i := g.Input("indices", tensor.Int64, idx.Shape)
		wt := g.Input("weight", w.DType, w.Shape)
		var y *trace.Tensor
		if c.PaddingIdx != nil {
			y = op.EmbeddingWithPadding(i, wt, *c.PaddingIdx)
		} else {
			y = op.Embedding(i, wt)
		}
		normBackward(g, y, []*trace.Tensor{wt}, []string{"gw"})
	})
	res := normRun(t, p, exec.StateMap{}, map[string]*tensor.Tensor{"indices": idx, "weight": w, "gy": r.get(t, name, "gy")})
	normClose(t, "y", res["y"], r.get(t, name, "y"))
	normClose(t, "grad weight", res["gw"], r.get(t, name, "gw"))
}
