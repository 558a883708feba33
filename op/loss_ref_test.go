package op_test

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"testing"

	"github.com/headroom-ml/headroom/internal/check"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/safetensors"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// lossRefPath was written by PyTorch 1.13; regenerate with
// /usr/bin/python3 scripts/reference/ops_loss.py.
const lossRefPath = "testdata/loss.safetensors"

func ceRef(ignore int, ls float64, red string) check.Func {
	return func(xs []*trace.Tensor) *trace.Tensor {
		return op.CrossEntropy(xs[0], xs[1], op.CrossEntropyOpts{IgnoreIndex: op.Class(ignore), LabelSmoothing: ls, Reduction: op.Reduction(red)})
	}
}

func attnRef(causal bool) check.Func {
	return func(xs []*trace.Tensor) *trace.Tensor {
		return op.ScaledDotProductAttention(xs[0], xs[1], xs[2], causal)
	}
}

// lossRefCases rebuilds every case of ops_loss.py with headroom's ops.
func lossRefCases() map[string]check.Func {
	c := map[string]check.Func{}
	for _, sm := range []struct {
		name string
		f    func(*trace.Tensor, int) *trace.Tensor
	}{{"softmax", op.Softmax}, {"log_softmax", op.LogSoftmax}} {
		f := sm.f
		c[sm.name+"_d0"] = un(func(x *trace.Tensor) *trace.Tensor { return f(x, 0) })
		c[sm.name+"_d1"] = un(func(x *trace.Tensor) *trace.Tensor { return f(x, 1) })
		c[sm.name+"_dm1"] = un(func(x *trace.Tensor) *trace.Tensor { return f(x, -1) })
		c[sm.name+"_long_row"] = un(func(x *trace.Tensor) *trace.Tensor { return f(x, -1) })
		c[sm.name+"_col_blocks"] = un(func(x *trace.Tensor) *trace.Tensor { return f(x, 1) })
	}
	for _, red := range []string{"mean", "sum", "none"} {
		c["ce_"+red] = ceRef(-100, 0, red)
		c["ce_ignore_"+red] = ceRef(-100, 0, red)
		c["ce_ls_"+red] = ceRef(-100, 0.1, red)
		c["ce_ls_ignore_"+red] = ceRef(-100, 0.1, red)
		r := op.Reduction(red)
		c["mse_"+red] = bin(func(a, b *trace.Tensor) *trace.Tensor { return op.MSELoss(a, b, r) })
		c["l1_"+red] = bin(func(a, b *trace.Tensor) *trace.Tensor { return op.L1Loss(a, b, r) })
	}
	c["ce_ignore_class"] = ceRef(1, 0.2, "mean")
	c["ce_spatial_mean"] = ceRef(-100, 0, "mean")
	c["ce_spatial_none"] = ceRef(-100, 0, "none")
	c["ce_spatial_ls_sum"] = ceRef(-100, 0.1, "sum")
	c["ce_spatial_ls_mean"] = ceRef(7, 0.1, "mean")
	c["ce_1d"] = ceRef(-100, 0.1, "none")
	c["ce_wide"] = ceRef(-100, 0.1, "") // "" is PyTorch's default, mean

	c["slice_step"] = un(func(x *trace.Tensor) *trace.Tensor { return op.Slice(x, 1, 1, 7, 2) })
	c["slice_step3_axis0"] = un(func(x *trace.Tensor) *trace.Tensor { return op.Slice(x, 0, 0, 4, 3) })
	c["slice_neg_last"] = un(func(x *trace.Tensor) *trace.Tensor { return op.Slice(x, -1, -3, math.MaxInt, 1) })
	c["slice_inner_step"] = un(func(x *trace.Tensor) *trace.Tensor { return op.Slice(x, -1, 0, math.MaxInt, 2) })
	c["narrow"] = un(func(x *trace.Tensor) *trace.Tensor { return op.Narrow(x, 2, 1, 3) })
	c["cat0"] = func(xs []*trace.Tensor) *trace.Tensor { return op.Cat(0, xs...) }
	c["cat1"] = func(xs []*trace.Tensor) *trace.Tensor { return op.Cat(1, xs...) }
	c["cat_last"] = func(xs []*trace.Tensor) *trace.Tensor { return op.Cat(-1, xs...) }
	c["split"] = un(func(x *trace.Tensor) *trace.Tensor {
		p := op.Split(x, 1, 3)
		return op.Cat(1, op.Scale(p[2], 2), p[0], op.Mul(p[1], p[1]))
	})
	c["chunk_unused"] = un(func(x *trace.Tensor) *trace.Tensor {
		p := op.Chunk(x, -1, 3)
		return op.Cat(-1, p[0], p[2])
	})
	for _, causal := range []bool{false, true} {
		tag := "full"
		if causal {
			tag = "causal"
		}
		for _, pre := range []string{"attn_", "attn_t1_", "attn_cross_", "attn_long_"} {
			c[pre+tag] = attnRef(causal)
		}
	}
	return c
}

func TestLossReference(t *testing.T) {
	f, err := safetensors.Open(lossRefPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var names []string
	if err := json.Unmarshal([]byte(f.Metadata["cases"]), &names); err != nil {
		t.Fatalf("metadata cases: %v", err)
	}
	cases := lossRefCases()
	seen := map[string]bool{}
	for _, name := range names {
		seen[name] = true
		fn, ok := cases[name]
		if !ok {
			t.Errorf("reference case %s has no Go counterpart", name)
			continue
		}
		t.Run(name, func(t *testing.T) {
			get := func(key string) *tensor.Tensor {
				x, err := f.Tensor(name + "/" + key)
				if err != nil {
					t.Fatal(err)
				}
				return x
			}
			has := func(key string) bool { _, err := f.Info(name + "/" + key); return err == nil }
			var in []*tensor.Tensor
			for i := 0; has(fmt.Sprintf("x%d", i)); i++ {
				in = append(in, get(fmt.Sprintf("x%d", i)))
			}
			y, grads, err := check.Eval(fn, in, get("seed"))
			if err != nil {
				t.Fatal(err)
			}
			refClose(t, "output", y, get("y"))
			for i, x := range in {
				if x.DType.IsFloat() {
					refClose(t, fmt.Sprintf("grad %d", i), grads[i], get(fmt.Sprintf("g%d", i)))
				}
			}
		})
	}
	var missing []string
	for name := range cases {
		if !seen[name] {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("Go cases missing from %s (regenerate it): %v", lossRefPath, missing)
	}
}

// refClose compares float32 results with rtol 1e-5, atol 1e-6.
func refClose(t *testing.T, what string, got, want *tensor.Tensor) {
	t.Helper()
	const rtol, atol = 1e-5, 1e-6
	if got.DType != want.DType || !got.Shape.Equal(want.Shape) {
		t.Fatalf("%s: got %v%v, want %v%v", what, got.DType, got.Shape, want.DType, want.Shape)
	}
	g, w := got.Float64s(), want.Float64s()
	bad, worst, at := 0, 0.0, -1
	for i := range g {
		d := math.Abs(g[i] - w[i])
		if math.IsNaN(g[i]) != math.IsNaN(w[i]) || d > atol+rtol*math.Abs(w[i]) {
			bad++
			if r := d / (atol + rtol*math.Abs(w[i])); r > worst || math.IsNaN(r) {
				worst, at = r, i
			}
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d elements differ; worst at %d: got %.9g, want %.9g (%.3gx tolerance)", what, bad, len(g), at, g[at], w[at], worst)
	}
}
