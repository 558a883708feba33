package zoo_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/safetensors"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// Tolerances of the parity tests. Errors are relative per tensor:
// max|a - b| / max|b|, a headroom's value and b PyTorch's, over the whole
// tensor (for a tensor stored only in part, max|b| comes from the stored
// statistics of the whole tensor and the maximum runs over the samples).
const (
	lossTol   = 1e-5
	gradTol   = 1e-4
	weightTol = 1e-4
)

// refCase is one file written by scripts/reference/zoo_ref.py.
type refCase struct {
	Name    string
	Tensors map[string]*tensor.Tensor
	Meta    struct {
		StateDict [][]json.RawMessage `json:"state_dict"`
		Params    []string            `json:"params"`
		NumParams int64               `json:"num_params"`
		InitSums  map[string]float64  `json:"init_sums"`
		SampleK   int                 `json:"sample_k"`
		SGD       map[string]float64  `json:"sgd"`
		AdamW     map[string]float64  `json:"adamw"`
	}
}

func loadCase(t *testing.T, name string) *refCase {
	t.Helper()
	path := filepath.Join("testdata", name+".safetensors")
	f, err := safetensors.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (regenerate with /usr/bin/python3 scripts/reference/zoo_ref.py)", err)
	}
	rc := &refCase{Name: name, Tensors: map[string]*tensor.Tensor{}}
	if err := json.Unmarshal([]byte(f.Metadata["case"]), &rc.Meta); err != nil {
		t.Fatalf("%s: metadata: %v", path, err)
	}
	for _, n := range f.Names() {
		if rc.Tensors[n], err = f.Tensor(n); err != nil {
			t.Fatal(err)
		}
	}
	return rc
}

// entry is one state_dict key: name, safetensors dtype code, shape.
type entry struct {
	Name  string
	DType string
	Shape tensor.Shape
}

func (e entry) String() string { return fmt.Sprintf("%s %s%v", e.Name, e.DType, e.Shape) }

func parseEntries(t *testing.T, raw [][]json.RawMessage) []entry {
	t.Helper()
	out := make([]entry, len(raw))
	for i, r := range raw {
		if len(r) != 3 {
			t.Fatalf("bad state_dict entry %s", r)
		}
		var shape []int
		if err := errors.Join(json.Unmarshal(r[0], &out[i].Name), json.Unmarshal(r[1], &out[i].DType), json.Unmarshal(r[2], &shape)); err != nil {
			t.Fatal(err)
		}
		out[i].Shape = tensor.Shape(shape)
		if out[i].Shape == nil {
			out[i].Shape = tensor.Shape{}
		}
	}
	return out
}

var dtypeCode = map[tensor.DType]string{tensor.Float32: "F32", tensor.Int64: "I64"}

func storeEntries(s *nn.Store) []entry {
	var out []entry
	for _, p := range s.Params() {
		out = append(out, entry{p.Name, dtypeCode[p.DType], p.Shape})
	}
	return out
}

// checkEntries compares the store's parameters and buffers, in order, with
// PyTorch's state_dict, leaving out the keys in skip (tied weights).
func checkEntries(t *testing.T, s *nn.Store, want []entry, skip ...string) {
	t.Helper()
	var w []entry
	for _, e := range want {
		if !contains(skip, e.Name) {
			w = append(w, e)
		}
	}
	got := storeEntries(s)
	for i := 0; i < max(len(got), len(w)); i++ {
		switch {
		case i >= len(got):
			t.Fatalf("entry %d: missing %v (and %d more)", i, w[i], len(w)-i-1)
		case i >= len(w):
			t.Fatalf("entry %d: unexpected %v (and %d more)", i, got[i], len(got)-i-1)
		case got[i].String() != w[i].String():
			t.Fatalf("entry %d: got %v, PyTorch has %v", i, got[i], w[i])
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// relErr is max|a-b| / scale (scale max|b|; 0 and 0 give 0).
func relErr(a, b []float64, scale float64) float64 {
	var d float64
	for i := range a {
		d = math.Max(d, math.Abs(a[i]-b[i]))
	}
	if scale == 0 {
		return d
	}
	return d / scale
}

func maxAbs(v []float64) float64 {
	var m float64
	for _, x := range v {
		m = math.Max(m, math.Abs(x))
	}
	return m
}

// errs collects the largest relative error of each kind, for the log.
type errs map[string]float64

func (e errs) note(kind string, v float64) {
	if v > e[kind] || math.IsNaN(v) {
		e[kind] = v
	}
}

// compare checks got (a whole tensor) against the reference of kind for
// name, stored whole or as samples and statistics.
func (rc *refCase) compare(t *testing.T, e errs, kind, name string, got *tensor.Tensor, tol float64) {
	t.Helper()
	g := got.Float64s()
	key := kind + "/" + name
	if name == "" {
		key = kind
	}
	if ref, ok := rc.Tensors[key]; ok {
		if !ref.Shape.Equal(got.Shape) {
			t.Errorf("%s %s: shape %v, reference %v", kind, name, got.Shape, ref.Shape)
			return
		}
		b := ref.Float64s()
		if kind == "adamw" {
			g, b = rc.wellConditioned(e, name, g, b)
		}
		r := relErr(g, b, maxAbs(ref.Float64s()))
		e.note(kind, r)
		if !(r <= tol) {
			t.Errorf("%s %s: relative error %.3g > %g", kind, name, r, tol)
		}
		return
	}
	sample, ok1 := rc.Tensors[kind+"_sample/"+name]
	stats, ok2 := rc.Tensors[kind+"_stats/"+name]
	if !ok1 || !ok2 {
		t.Errorf("%s %s: no reference in %s", kind, name, rc.Name)
		return
	}
	st := stats.Float64s() // sum, l2 norm, max |x|, sum |x|
	n := len(g)
	k := rc.Meta.SampleK
	a := make([]float64, k)
	for j := range k {
		a[j] = g[j*n/k]
	}
	b := sample.Float64s()
	if kind == "adamw" {
		a, b = rc.wellConditioned(e, name, a, b)
	}
	r := relErr(a, b, st[2])
	var sum, sq, sabs float64
	for _, x := range g {
		sum += x
		sq += x * x
		sabs += math.Abs(x)
	}
	norm := math.Sqrt(sq)
	rn := math.Abs(norm-st[1]) / st[1]
	rm := math.Abs(maxAbs(g)-st[2]) / st[2]
	rs := math.Abs(sum-st[0]) / st[3]
	ra := math.Abs(sabs-st[3]) / st[3]
	e.note(kind, r)
	e.note(kind+" stats", max(rn, rm, rs, ra))
	if !(r <= tol) || !(max(rn, rm, rs, ra) <= tol) {
		t.Errorf("%s %s: samples relative error %.3g; sum %.3g, norm %.3g, max %.3g, abs sum %.3g (tolerance %g)",
			kind, name, r, rs, rn, rm, ra, tol)
	}
}

// adamCond: AdamW's first step moves a weight by about lr*sign(g), so where
// the reference gradient is within 10x the gradient tolerance of zero
// (|g| < 10*gradTol*max|g|) its direction is not determined by float32
// arithmetic: an error of gradTol*max|g| may flip it. Those elements are
// left out of the AdamW comparison (and counted). Elsewhere a gradient
// error of gradTol*max|g| changes the update by at most
// lr*eps*err/g² ≈ 1e-12.
const adamCond = 10 * gradTol

// wellConditioned drops from a (headroom) and b (PyTorch), laid out as the
// stored AdamW reference of name (whole or sampled), the elements whose
// reference gradient is too close to zero to fix the update's sign.
func (rc *refCase) wellConditioned(e errs, name string, a, b []float64) ([]float64, []float64) {
	var g []float64
	var gmax float64
	if t, ok := rc.Tensors["grad/"+name]; ok {
		g = t.Float64s()
		gmax = maxAbs(g)
	} else {
		g = rc.Tensors["grad_sample/"+name].Float64s()
		gmax = rc.Tensors["grad_stats/"+name].Float64s()[2]
	}
	var a2, b2 []float64
	for i := range a {
		if math.Abs(g[i]) >= adamCond*gmax {
			a2 = append(a2, a[i])
			b2 = append(b2, b[i])
		}
	}
	e["adamw skipped"] += float64(len(a) - len(a2))
	e["adamw checked"] += float64(len(a2))
	return a2, b2
}

// parityCase is how the Go test builds the model of a reference file.
type parityCase struct {
	file  string
	build func(b nn.Builder) train.Model
	loss  train.LossFunc
	tied  []string // state_dict keys the store does not hold
}

var parityCases = []parityCase{
	{file: "resnet18", loss: zoo.CrossEntropyLoss,
		build: func(b nn.Builder) train.Model { return zoo.ResNet18(b, 10) }},
	{file: "resnet_bottleneck", loss: zoo.CrossEntropyLoss,
		build: func(b nn.Builder) train.Model {
			return zoo.NewResNet(b, zoo.ResNetConfig{Block: zoo.Bottleneck, Layers: [4]int{1, 1, 1, 1}, NumClasses: 7})
		}},
	{file: "gpt", loss: zoo.GPTLoss, tied: []string{zoo.GPTTiedKey},
		build: func(b nn.Builder) train.Model {
			return zoo.NewGPT(b, zoo.GPTConfig{NLayer: 2, NHead: 2, NEmbd: 32, BlockSize: 16, VocabSize: 64, Bias: true})
		}},
	{file: "gpt_nobias", loss: zoo.GPTLoss, tied: []string{zoo.GPTTiedKey},
		build: func(b nn.Builder) train.Model {
			return zoo.NewGPT(b, zoo.GPTConfig{NLayer: 1, NHead: 4, NEmbd: 32, BlockSize: 16, VocabSize: 64})
		}},
	{file: "rrdbnet", loss: zoo.L1Loss,
		build: func(b nn.Builder) train.Model {
			return zoo.NewRRDBNet(b, zoo.RRDBNetConfig{InNC: 3, OutNC: 3, NF: 16, NB: 2, GC: 8})
		}},
}

// TestParity loads each model with the same weights as PyTorch and checks
// one training step: the loss, every gradient, the running statistics and
// the weights after one SGD step (lr 0.1, momentum 0.9) and, from the same
// start, one AdamW step (PyTorch's defaults).
func TestParity(t *testing.T) {
	for _, pc := range parityCases {
		t.Run(pc.file, func(t *testing.T) {
			rc := loadCase(t, pc.file)
			s := nn.NewStore()
			m := pc.build(s.Root())
			checkEntries(t, s, parseEntries(t, rc.Meta.StateDict), pc.tied...)
			var trainable []string
			for _, p := range s.Trainable() {
				trainable = append(trainable, p.Name)
			}
			if strings.Join(trainable, " ") != strings.Join(rc.Meta.Params, " ") {
				t.Fatalf("parameters\n%v\nPyTorch's named_parameters()\n%v", trainable, rc.Meta.Params)
			}
			if s.NumParams() != rc.Meta.NumParams {
				t.Fatalf("%d parameters, PyTorch has %d", s.NumParams(), rc.Meta.NumParams)
			}
			dev := device.CPU()
			if err := s.Materialize(dev, 1); err != nil {
				t.Fatal(err)
			}
			defer s.Release()
			sd := hashStateDict(s)
			for name, want := range rc.Meta.InitSums {
				var got, abs float64
				for _, v := range sd[name].Float64s() {
					got += v
					abs += math.Abs(v)
				}
				if math.Abs(got-want) > 1e-9*abs {
					t.Fatalf("hashinit of %s: sum %v, Python's %v: the generators differ", name, got, want)
				}
			}
			for _, k := range pc.tied { // PyTorch's state_dict has the tied key too
				sd[k] = sd[zoo.GPTEmbeddingKey].Clone()
			}
			x, y := rc.Tensors["x"], rc.Tensors["y"]
			wantLoss := rc.Tensors["loss"].Float64s()[0]
			e := errs{}

			step := func(opt optim.Optimizer) {
				t.Helper()
				if err := zoo.LoadStateDict(m, s, sd, true); err != nil {
					t.Fatal(err)
				}
				tr, err := train.New(dev, s, m, pc.loss, opt)
				if err != nil {
					t.Fatal(err)
				}
				defer tr.Close()
				loss, err := tr.Step(context.Background(), x, y)
				if err != nil {
					t.Fatal(err)
				}
				r := math.Abs(loss-wantLoss) / math.Abs(wantLoss)
				e.note("loss", r)
				if !(r <= lossTol) {
					t.Errorf("loss %v, PyTorch %v (relative error %.3g)", loss, wantLoss, r)
				}
			}

			// Evaluation mode at the initial weights (running statistics).
			if err := zoo.LoadStateDict(m, s, sd, true); err != nil {
				t.Fatal(err)
			}
			tr, err := train.New(dev, s, m, pc.loss, nil)
			if err != nil {
				t.Fatal(err)
			}
			out, err := tr.Predict(context.Background(), x)
			tr.Close()
			if err != nil {
				t.Fatal(err)
			}
			rc.compare(t, e, "eval_out", "", out, gradTol)

			sgd, err := optim.NewSGD(optim.SGDConfig{LR: rc.Meta.SGD["lr"], Momentum: rc.Meta.SGD["momentum"]})
			if err != nil {
				t.Fatal(err)
			}
			step(sgd)
			for _, p := range s.Trainable() {
				rc.compare(t, e, "grad", p.Name, p.Grad, gradTol)
				rc.compare(t, e, "sgd", p.Name, p.Value, weightTol)
			}
			for _, p := range s.Params() {
				if p.Trainable {
					continue
				}
				ref, ok := rc.Tensors["buffer/"+p.Name]
				if !ok {
					t.Errorf("buffer %s: no reference", p.Name)
					continue
				}
				b, a := ref.Float64s(), p.Value.Float64s()
				r := relErr(a, b, maxAbs(b))
				e.note("buffers", r)
				if !(r <= weightTol) {
					t.Errorf("buffer %s after the step: %v, PyTorch %v (relative error %.3g)", p.Name, clip(a), clip(b), r)
				}
			}

			adamw, err := optim.NewAdamW(optim.AdamWDefaults())
			if err != nil {
				t.Fatal(err)
			}
			step(adamw)
			for _, p := range s.Trainable() {
				rc.compare(t, e, "adamw", p.Name, p.Value, weightTol)
			}
			t.Logf("%s: %d parameters; max relative errors: eval output %.2g, loss %.2g, gradients %.2g (stats %.2g), buffers %.2g, SGD %.2g (stats %.2g), AdamW %.2g (stats %.2g; %v of %v compared elements left out: gradient near 0)",
				pc.file, s.NumParams(), e["eval_out"], e["loss"], e["grad"], e["grad stats"], e["buffers"], e["sgd"], e["sgd stats"], e["adamw"], e["adamw stats"], e["adamw skipped"], e["adamw skipped"]+e["adamw checked"])
		})
	}
}

func clip(v []float64) []float64 {
	if len(v) > 6 {
		return v[:6]
	}
	return v
}
