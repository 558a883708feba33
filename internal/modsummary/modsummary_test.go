package modsummary

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

type refModel struct {
	Input   []int `json:"input"`
	Total   int64 `json:"total"`
	Modules []struct {
		Name   string `json:"name"`
		Type   string `json:"type"`
		Params int64  `json:"params"`
		Output []int  `json:"output"`
	} `json:"modules"`
}

func adam() (optim.Optimizer, error) { return optim.NewAdam(optim.AdamDefaults()) }

// Every module's parameter count and output shape agree with PyTorch's
// (scripts/reference/summary_ref.py: named_modules, forward hooks). PyTorch
// has modules headroom does without (ReLU, Dropout, pooling as modules):
// they hold no parameters, and every module with parameters is here.
func TestMatchesPyTorch(t *testing.T) {
	js, err := os.ReadFile("testdata/summary.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Models map[string]refModel `json:"models"`
	}
	if err := json.Unmarshal(js, &ref); err != nil {
		t.Fatal(err)
	}
	for name, want := range ref.Models {
		heavy := name == "resnet50" || name == "rrdbnet"
		if testing.Short() && heavy {
			continue
		}
		t.Run(name, func(t *testing.T) {
			spec, err := zoo.Lookup(name)
			if err != nil {
				t.Fatal(err)
			}
			s, err := Of(spec, want.Input[0], adam, train.Config{})
			if err != nil {
				t.Fatal(err)
			}
			if s.Params != want.Total {
				t.Errorf("%d parameters, PyTorch %d", s.Params, want.Total)
			}
			rows := map[string]Row{}
			for _, r := range s.Rows {
				rows[r.Module] = r
			}
			matched, shapes := 0, 0
			for _, m := range want.Modules {
				r, ok := rows[m.Name]
				if !ok {
					if m.Params != 0 {
						t.Errorf("module %q (%s, %d parameters) is missing", m.Name, m.Type, m.Params)
					}
					continue
				}
				matched++
				if r.Params != m.Params {
					t.Errorf("module %q (%s): %d parameters, PyTorch %d", m.Name, m.Type, r.Params, m.Params)
				}
				if m.Output != nil {
					if got := tensor.Shape(m.Output).String(); r.Output != got {
						t.Errorf("module %q (%s): output %s, PyTorch %s", m.Name, m.Type, r.Output, got)
					}
					shapes++
				}
			}
			if matched < len(rows) {
				for _, r := range s.Rows {
					found := false
					for _, m := range want.Modules {
						found = found || m.Name == r.Module
					}
					if !found {
						t.Errorf("module %q is not one of PyTorch's", r.Module)
					}
				}
			}
			t.Logf("%d modules and %d output shapes checked", matched, shapes)
		})
	}
}

func TestPrint(t *testing.T) {
	spec, _ := zoo.Lookup("cnn")
	s, err := Of(spec, 4, adam, train.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	s.Print(&b, 0)
	out := b.String()
	for _, want := range []string{"conv1", "320", "[4, 32, 28, 28]", "fc2", "[4, 10]", "parameters: 421,642; buffers: 0 elements", "total peak"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	// The activations at the peak, by module, add up to the plan's.
	var top Row
	for _, r := range s.Rows {
		if r.Depth == 0 {
			top = r
		}
	}
	if top.AtPeak == 0 || top.AtPeak > s.Plan.ArenaBytes {
		t.Errorf("at peak %d, plan arena %d, activations %d", top.AtPeak, s.Plan.ArenaBytes, s.Plan.Activations)
	}
}
