package nn_test

import (
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/safetensors"
	"github.com/headroom-ml/headroom/tensor"
)

func twoLayers() *nn.Store {
	s := nn.NewStore()
	nn.NewLinear(s.Root().Sub("0"), 784, 256, true)
	nn.NewLinear(s.Root().Sub("2"), 256, 10, false)
	return s
}

func TestNamesAndCounts(t *testing.T) {
	s := twoLayers()
	var names []string
	for _, p := range s.Params() {
		names = append(names, p.Name+p.Shape.String())
	}
	want := "0.weight[256, 784] 0.bias[256] 2.weight[10, 256]"
	if got := strings.Join(names, " "); got != want {
		t.Fatalf("names %q, want %q", got, want)
	}
	// sum(p.numel()) for nn.Sequential(Linear(784,256), ReLU(), Linear(256,10,bias=False))
	if n := s.NumParams(); n != 784*256+256+256*10 {
		t.Fatalf("NumParams %d", n)
	}
}

// PyTorch's default init draws Linear weights from U(-1/sqrt(in), 1/sqrt(in)).
func TestDefaultInitBounds(t *testing.T) {
	s := twoLayers()
	if err := s.Materialize(device.CPU(), 3); err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	p, _ := s.Get("0.weight")
	bound := 1 / math.Sqrt(784)
	var sum, sq float64
	for _, v := range p.Value.F32() {
		if math.Abs(float64(v)) > bound {
			t.Fatalf("value %v outside ±%v", v, bound)
		}
		sum += float64(v)
		sq += float64(v) * float64(v)
	}
	n := float64(p.Numel())
	// Variance of U(-b, b) is b²/3.
	if v := sq/n - (sum/n)*(sum/n); math.Abs(v-bound*bound/3) > 0.02*bound*bound {
		t.Fatalf("variance %v, want %v", v, bound*bound/3)
	}
}

func TestStateDictRoundTripThroughSafetensors(t *testing.T) {
	a := twoLayers()
	if err := a.Materialize(device.CPU(), 1); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "m.safetensors")
	if err := safetensors.WriteFile(path, a.StateDict(), nil); err != nil {
		t.Fatal(err)
	}
	sd, err := safetensors.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	b := twoLayers()
	if err := b.Materialize(device.CPU(), 99); err != nil {
		t.Fatal(err)
	}
	if err := b.LoadStateDict(sd, true); err != nil {
		t.Fatal(err)
	}
	for _, p := range a.Params() {
		q, _ := b.Get(p.Name)
		if string(p.Value.Data) != string(q.Value.Data) {
			t.Fatalf("%s differs after round trip", p.Name)
		}
	}
}

func TestLoadStateDictListsProblems(t *testing.T) {
	s := twoLayers()
	if err := s.Materialize(device.CPU(), 1); err != nil {
		t.Fatal(err)
	}
	sd := s.StateDict()
	delete(sd, "0.bias")
	sd["3.weight"] = tensor.New(tensor.Float32, tensor.Shape{1})
	sd["2.weight"] = tensor.New(tensor.Float32, tensor.Shape{10, 255})
	before := append([]byte(nil), mustGet(s, "0.weight").Value.Data...)
	sd["0.weight"] = tensor.New(tensor.Float32, tensor.Shape{256, 784})
	err := s.LoadStateDict(sd, true)
	var le *nn.LoadError
	if !errors.As(err, &le) {
		t.Fatalf("want *LoadError, got %v", err)
	}
	if strings.Join(le.Missing, ",") != "0.bias" || strings.Join(le.Unexpected, ",") != "3.weight" || len(le.Mismatched) != 1 || !strings.Contains(le.Mismatched[0], "2.weight") {
		t.Fatalf("got %+v", le)
	}
	if string(mustGet(s, "0.weight").Value.Data) != string(before) {
		t.Fatal("a rejected state_dict changed the model")
	}
}

func mustGet(s *nn.Store, name string) *nn.Param {
	p, ok := s.Get(name)
	if !ok {
		panic(name)
	}
	return p
}
