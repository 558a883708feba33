package zoo_test

import (
	"sort"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

func TestLookup(t *testing.T) {
	names := zoo.Names()
	if !sort.StringsAreSorted(names) {
		t.Errorf("Names not sorted: %v", names)
	}
	for _, want := range []string{"cnn", "gpt2", "mlp", "resnet18", "resnet50", "resnet152", "rrdbnet"} {
		s, err := zoo.Lookup(want)
		if err != nil || s.Name != want {
			t.Errorf("Lookup(%q) = %q, %v", want, s.Name, err)
		}
	}
	_, err := zoo.Lookup("resnet-18")
	if err == nil || !strings.Contains(err.Error(), `"resnet-18"`) || !strings.Contains(err.Error(), "resnet18") {
		t.Errorf("Lookup of an unknown name: %v", err)
	}
}

// Every model of the registry traces, differentiates and plans a training
// step on its example batch, on the meta device (no data, real sizes).
func TestSpecsPlanOnMeta(t *testing.T) {
	if testing.Short() {
		t.Skip("traces full-size models")
	}
	for _, spec := range zoo.Specs() {
		t.Run(spec.Name, func(t *testing.T) {
			dev := device.Meta()
			s := nn.NewStore()
			m := spec.New(s.Root())
			if err := s.Materialize(dev, 1); err != nil {
				t.Fatal(err)
			}
			defer s.Release()
			opt, err := optim.NewAdamW(optim.AdamWDefaults())
			if err != nil {
				t.Fatal(err)
			}
			tr, err := train.New(dev, s, m, spec.Loss, opt)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			x, y := spec.Example(2)
			mp, err := tr.Plan(x, y)
			if err != nil {
				t.Fatal(err)
			}
			if mp.Activations <= 0 || mp.Parameters < 4*s.NumParams() {
				t.Errorf("implausible plan %+v for %d parameters", mp, s.NumParams())
			}
			t.Logf("%s: %d parameters, %+v", spec.Name, s.NumParams(), mp)
		})
	}
}
