package zoo_test

import (
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/internal/testkit"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// The arena's packing overhead (arena size over the peak of live bytes) stays
// under 5% for every model of the zoo.
func TestArenaPackingOverhead(t *testing.T) {
	for _, spec := range zoo.Specs() {
		if testing.Short() && spec.Name != "mlp" && spec.Name != "cnn" {
			continue
		}
		t.Run(spec.Name, func(t *testing.T) {
			opt, _ := optim.NewAdam(optim.AdamDefaults())
			tr, err := train.Setup(device.Meta(), 0, testkit.Build(spec), opt)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			for _, n := range []int{1, 3} {
				x, y := spec.Example(n)
				p, err := tr.TrainProgram(x, y)
				if err != nil {
					t.Fatal(err)
				}
				if o := p.Plan.Overhead(); o >= 0.05 {
					t.Errorf("batch %d: arena %d for a peak of %d live bytes: %.1f%% overhead", n, p.Plan.ArenaBytes, p.Plan.PeakBytes, 100*o)
				}
			}
		})
	}
}
