package op_test

import (
	"encoding/json"
	"math"
	"math/rand"
	"testing"

	"github.com/headroom-ml/headroom/internal/check"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// The zero CrossEntropyOpts is PyTorch's defaults: a literal that sets only
// LabelSmoothing must not ignore class 0 (it did when IgnoreIndex was an
// int whose zero value was class 0).
func TestCrossEntropyZeroOptsIgnoreNoClass(t *testing.T) {
	x := check.Random(rand.New(rand.NewSource(3)), tensor.Shape{4, 3}, -1, 1)
	tg := tensor.FromInt64(tensor.Shape{4}, []int64{0, 0, 1, 2})
	in := []*tensor.Tensor{x, tg}
	eval := func(o op.CrossEntropyOpts) float64 {
		t.Helper()
		y, _, err := check.Eval(func(xs []*trace.Tensor) *trace.Tensor { return op.CrossEntropy(xs[0], xs[1], o) }, in, nil)
		if err != nil {
			t.Fatal(err)
		}
		return y.F64()[0]
	}
	def := op.DefaultCrossEntropyOpts()
	def.LabelSmoothing = 0.1
	want := eval(def)
	if got := eval(op.CrossEntropyOpts{LabelSmoothing: 0.1}); math.Abs(got-want) > 1e-12 {
		t.Errorf("CrossEntropyOpts{LabelSmoothing: 0.1} = %v, want PyTorch's default %v", got, want)
	}
	if got := eval(op.CrossEntropyOpts{}); got != eval(op.DefaultCrossEntropyOpts()) {
		t.Errorf("zero CrossEntropyOpts = %v, want DefaultCrossEntropyOpts's %v", got, eval(op.DefaultCrossEntropyOpts()))
	}
	// Class 0 ignored on request: the mean over the two other positions.
	if got := eval(op.CrossEntropyOpts{IgnoreIndex: op.Class(0)}); got == eval(op.CrossEntropyOpts{}) || math.IsNaN(got) {
		t.Errorf("IgnoreIndex: Class(0) gave %v, the same as no ignored class", got)
	}
}

func TestClassIndex(t *testing.T) {
	for _, c := range []struct {
		idx  op.ClassIndex
		or   int
		set  bool
		json string
	}{
		{op.ClassIndex{}, -100, false, "null"},
		{op.Class(0), 0, true, "0"},
		{op.Class(-1), -1, true, "-1"},
	} {
		if got := c.idx.Or(-100); got != c.or {
			t.Errorf("%v.Or(-100) = %d, want %d", c.idx, got, c.or)
		}
		if _, set := c.idx.Get(); set != c.set {
			t.Errorf("%v set = %v, want %v", c.idx, set, c.set)
		}
		b, err := json.Marshal(c.idx)
		if err != nil || string(b) != c.json {
			t.Errorf("json %v = %s, %v; want %s", c.idx, b, err, c.json)
		}
		var back op.ClassIndex
		if err := json.Unmarshal(b, &back); err != nil || back != c.idx {
			t.Errorf("round trip of %s = %v, %v", b, back, err)
		}
	}
	var bad op.ClassIndex
	if err := json.Unmarshal([]byte(`"x"`), &bad); err == nil {
		t.Error(`ClassIndex accepted "x"`)
	}
}

func TestOptionsJSON(t *testing.T) {
	o := op.CrossEntropyOpts{IgnoreIndex: op.Class(3), LabelSmoothing: 0.2, Reduction: op.ReductionSum}
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"IgnoreIndex":3,"LabelSmoothing":0.2,"Reduction":"sum"}`; string(b) != want {
		t.Errorf("marshal = %s, want %s", b, want)
	}
	var back op.CrossEntropyOpts
	if err := json.Unmarshal(b, &back); err != nil || back != o {
		t.Errorf("round trip = %+v, %v; want %+v", back, err, o)
	}
	for _, bad := range []string{`{"Reduction":"avg"}`} {
		if err := json.Unmarshal([]byte(bad), &back); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	for _, a := range []op.Approximate{op.GELUExact, op.GELUTanh} {
		b, err := json.Marshal(a)
		var back op.Approximate
		if err != nil || json.Unmarshal(b, &back) != nil || back != a {
			t.Errorf("approximate %q: %s, %v, back %q", a, b, err, back)
		}
	}
	if err := new(op.Approximate).UnmarshalText([]byte("erf")); err == nil {
		t.Error(`Approximate accepted "erf"`)
	}
	if b, _ := json.Marshal(op.Approximate("")); string(b) != `"none"` {
		t.Errorf("zero Approximate marshals as %s, want \"none\"", b)
	}
}
