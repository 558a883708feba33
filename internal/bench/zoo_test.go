package bench

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	benchscript "github.com/headroom-ml/headroom/scripts/bench"
	"github.com/headroom-ml/headroom/scripts/reference"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/zoo"
)

// Every zoo model can be a workload: its batch from the registry, random
// inputs of those shapes, integers within the output's classes.
func TestFromZooEveryModel(t *testing.T) {
	for _, name := range zoo.Names() {
		w, err := FromZoo("", name, 2)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if w.Name != name || w.ZooModel != name || w.Model == nil || w.Loss == nil || w.X.Shape[0] != 2 {
			t.Errorf("%s: workload %+v", name, w)
		}
		if w.X.DType == tensor.Int64 || w.Y.DType == tensor.Int64 {
			if w.Classes < 2 {
				t.Errorf("%s: %d classes", name, w.Classes)
			}
		}
		if w.Y.Shape.NumElements() > 1<<16 {
			continue // making the big ones' batches says nothing more
		}
		x, y := w.Inputs(rand.New(rand.NewPCG(1, 2)))
		if !x.Shape.Equal(w.X.Shape) || !y.Shape.Equal(w.Y.Shape) {
			t.Errorf("%s: inputs %v %v, want %v %v", name, x.Shape, y.Shape, w.X.Shape, w.Y.Shape)
		}
		for _, v := range []*tensor.Tensor{x, y} {
			if v.DType == tensor.Int64 {
				for _, l := range v.I64() {
					if l < 0 || l >= int64(w.Classes) {
						t.Fatalf("%s: label %d outside [0, %d)", name, l, w.Classes)
					}
				}
			}
		}
	}
	for _, bad := range []struct {
		model string
		batch int
	}{{"nosuch", 2}, {"mlp", 0}, {"mlp", -1}} {
		if _, err := FromZoo("", bad.model, bad.batch); err == nil {
			t.Errorf("FromZoo(%q, %d) succeeded", bad.model, bad.batch)
		}
	}
}

// A child process finds its workload again from ChildName: standard
// workloads by name, any other zoo model at its batch.
func TestChildNames(t *testing.T) {
	for _, c := range []struct {
		model string
		batch int
		want  string
	}{{"mlp-1024", 128, "zoo:mlp-1024:128"}, {"resnet50", 3, "zoo:resnet50:3"}, {"rrdbnet", 4, "rrdbnet"}, {"rrdbnet", 2, "zoo:rrdbnet:2"}} {
		w, err := FromZoo("", c.model, c.batch)
		if err != nil {
			t.Fatal(err)
		}
		if got := w.ChildName(); got != c.want {
			t.Errorf("ChildName(%s at %d) = %q, want %q", c.model, c.batch, got, c.want)
		}
		back, err := LookupChild(w.ChildName())
		if err != nil || back.Name != w.Name || back.Batch != w.Batch || back.ZooModel != w.ZooModel {
			t.Errorf("LookupChild(%q) = %+v, %v", w.ChildName(), back, err)
		}
	}
	for _, w := range Standard() {
		if got := w.ChildName(); got != w.Name {
			t.Errorf("standard %s: ChildName %q", w.Name, got)
		}
	}
	for _, bad := range []string{"zoo:mlp", "zoo:mlp:", "zoo:mlp:x", "zoo:mlp:+3", "zoo::2", "nosuch"} {
		if _, err := LookupChild(bad); err == nil {
			t.Errorf("LookupChild(%q) succeeded", bad)
		}
	}
	ws, err := ParseModels(" resnet18, mlp,resnet18", 0)
	if err != nil || len(ws) != 2 || ws[0].Batch != 8 || ws[1].Batch != 8 {
		t.Errorf("ParseModels: %v, %v", ws, err)
	}
	if ws, _ := ParseModels("rrdbnet", 0); len(ws) != 1 || ws[0].Batch != 4 {
		t.Errorf("rrdbnet's default batch: %+v", ws)
	}
	if _, err := ParseModels(" , ", 0); err == nil {
		t.Error("ParseModels of no names succeeded")
	}
}

// The PyTorch script gets each workload's model and batch from the zoo,
// and knows how to build every zoo model (its MODELS table).
func TestPyTorchSide(t *testing.T) {
	w, err := Lookup("gpt")
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(PyTorchArgs(w), " ")
	if want := "--workload gpt --model gpt-bytes --x i64:8,256 --y i64:8,256 --classes 256"; got != want {
		t.Errorf("PyTorchArgs(gpt) = %q, want %q", got, want)
	}
	r, _ := Lookup("rrdbnet")
	if got := strings.Join(PyTorchArgs(r), " "); !strings.Contains(got, "--x f32:4,3,32,32 --y f32:4,3,128,128") {
		t.Errorf("PyTorchArgs(rrdbnet) = %q", got)
	}
	s, _ := Lookup("sgemm")
	if got := PyTorchArgs(s); !slices.Equal(got, []string{"--workload", "sgemm"}) {
		t.Errorf("PyTorchArgs(sgemm) = %q", got)
	}
	d := Driver{Warmup: 1, Steps: 2, Threads: 2, Seed: 3, Precision: "bf16-mixed"}
	if got := strings.Join(d.childFlags(), " "); got != "--warmup 1 --steps 2 --threads 2 --seed 3 --precision bf16-mixed" {
		t.Errorf("child flags %q", got)
	}

	table := regexp.MustCompile(`(?s)\nMODELS = \{\n(.*?)\n\}`).FindStringSubmatch(benchscript.Script)
	if table == nil {
		t.Fatal("no MODELS table in the embedded script")
	}
	keys := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+"([^"]+)":`).FindAllStringSubmatch(table[1], -1) {
		keys[m[1]] = true
	}
	for _, name := range zoo.Names() {
		if !keys[name] {
			t.Errorf("pytorch_bench.py has no PyTorch definition of zoo model %q", name)
		}
	}
	// The embedded copies are the repository's files.
	for path, text := range map[string]string{"../../" + ScriptPath: benchscript.Script, "../../scripts/reference/torch_models.py": reference.TorchModels} {
		b, err := os.ReadFile(path)
		if err != nil || string(b) != text {
			t.Errorf("%s: embedded copy differs (%v)", path, err)
		}
	}
	dir := t.TempDir()
	p, err := WriteScript(dir)
	if err != nil || filepath.Dir(p) != dir {
		t.Fatalf("WriteScript: %q, %v", p, err)
	}
	for _, f := range []string{benchscript.Name, reference.TorchModelsName} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
}
