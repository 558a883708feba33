package optim

import (
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/headroom-ml/headroom/safetensors"
	"github.com/headroom-ml/headroom/tensor"
)

// Reference values come from scripts/reference/optim_ref.py (PyTorch 1.13);
// the files in testdata are committed so these tests need no Python.

// The parameters of every optimizer run, in the script's order.
var refParams = []string{"p0", "p1", "p2", "p3"}

const refSteps = 6

// refFile is one loaded reference file.
type refFile struct {
	name    string
	tensors map[string]*tensor.Tensor
	configs map[string]json.RawMessage
}

func loadRef(t *testing.T, name string) *refFile {
	t.Helper()
	path := filepath.Join("testdata", name+".safetensors")
	f, err := safetensors.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := &refFile{name: path, tensors: map[string]*tensor.Tensor{}}
	for _, n := range f.Names() {
		if r.tensors[n], err = f.Tensor(n); err != nil {
			t.Fatal(err)
		}
	}
	if err := json.Unmarshal([]byte(f.Metadata["configs"]), &r.configs); err != nil {
		t.Fatalf("%s: metadata configs: %v", path, err)
	}
	return r
}

// f32 returns a copy of the named float32 tensor's values, or nil if the
// file has no such tensor (a gradient that is None).
func (r *refFile) f32(t *testing.T, name string) []float32 {
	t.Helper()
	x, ok := r.tensors[name]
	if !ok {
		return nil
	}
	if x.DType != tensor.Float32 {
		t.Fatalf("%s: %s is %v, want float32", r.name, name, x.DType)
	}
	return append([]float32(nil), x.F32()...)
}

func (r *refFile) must(t *testing.T, name string) []float32 {
	t.Helper()
	v := r.f32(t, name)
	if v == nil {
		t.Fatalf("%s: no tensor %q", r.name, name)
	}
	return v
}

func (r *refFile) config(t *testing.T, name string, into any) {
	t.Helper()
	raw, ok := r.configs[name]
	if !ok {
		t.Fatalf("%s: no config %q in metadata", r.name, name)
	}
	if err := json.Unmarshal(raw, into); err != nil {
		t.Fatalf("%s: config %q: %v", r.name, name, err)
	}
}

// diff measures how far got is from want: the largest relative difference
// (absolute where want is 0) and how many elements differ in any bit.
type diff struct {
	maxRel   float64
	mismatch int
	n        int
}

func (d *diff) add(got, want []float32) error {
	if len(got) != len(want) {
		return fmt.Errorf("got %d values, want %d", len(got), len(want))
	}
	for i := range got {
		d.n++
		g, w := float64(got[i]), float64(want[i])
		if math.Float32bits(got[i]) == math.Float32bits(want[i]) {
			continue
		}
		d.mismatch++
		r := math.Abs(g - w)
		if w != 0 {
			r /= math.Abs(w)
		}
		if math.IsNaN(r) {
			r = math.Inf(1)
		}
		d.maxRel = max(d.maxRel, r)
	}
	return nil
}

func (d diff) String() string {
	return fmt.Sprintf("max rel diff %.3g, %d of %d values not bit-identical", d.maxRel, d.mismatch, d.n)
}
