package train_test

import (
	"context"
	"math/rand"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/internal/testkit"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

func fashionBatch(r *rand.Rand, n int) (*tensor.Tensor, *tensor.Tensor) {
	return testkit.Classification(r, tensor.Shape{n, 1, 28, 28}, 10)
}

// Reserved memory does not grow after the first step, over 200 steps with a
// shorter last batch every epoch.
func TestReservedDoesNotGrow(t *testing.T) {
	spec, _ := zoo.Lookup("cnn")
	dev := device.CPU()
	opt, _ := optim.NewAdam(optim.AdamDefaults())
	tr, err := train.Setup(dev, 1, testkit.Build(spec), opt)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	r := rand.New(rand.NewSource(1))
	full, fullY := fashionBatch(r, 16)
	last, lastY := fashionBatch(r, 5)
	var after1 int64
	for step := 0; step < 200; step++ {
		x, y := full, fullY
		if step%10 == 9 {
			x, y = last, lastY // each "epoch" of 10 batches ends short
		}
		if _, err := tr.Step(context.Background(), x, y); err != nil {
			t.Fatal(err)
		}
		if step == 0 {
			after1 = dev.Alloc.MemoryReserved()
		}
	}
	if peak := dev.Alloc.Stats().ReservedBytes.Peak; peak != after1 {
		t.Fatalf("reserved after the first step %d, peak over 200 steps %d", after1, peak)
	}
}

func rss(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status on this system")
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("VmRSS not found")
	return 0
}

func settledRSS(t *testing.T) int64 {
	runtime.GC()
	debug.FreeOSMemory()
	return rss(t)
}

// After an epoch, releasing the trainer's memory brings the process's
// resident memory back to within 10% of start-up plus parameters and
// optimizer state.
func TestResidentMemoryFallsAfterEpoch(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	x, y := fashionBatch(r, 64)
	start := settledRSS(t)
	dev := device.CPU()
	s := nn.NewStore()
	m := zoo.NewMLP(s.Root(), 784, 1024, 1024, 10) // ~1.9M parameters: 7.5 MB, Adam state 15 MB
	if err := s.Materialize(dev, 1); err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	opt, _ := optim.NewAdam(optim.AdamDefaults())
	tr, err := train.New(dev, s, m, zoo.CrossEntropyLoss, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	for i := 0; i < 20; i++ {
		if _, err := tr.Step(context.Background(), x, y); err != nil {
			t.Fatal(err)
		}
	}
	during := settledRSS(t)
	arena := tr.Arena().Size()
	tr.ReleaseMemory()
	after := settledRSS(t)
	st := dev.Alloc.Stats()
	kept := st.ByCategory[device.Parameter] + st.ByCategory[device.OptimizerState]
	want := start + kept
	t.Logf("RSS at start %d MiB, training %d MiB, after release %d MiB; parameters+optimizer state %d MiB, arena %d MiB", start>>20, during>>20, after>>20, kept>>20, arena>>20)
	// The runtime's own resident bytes vary by a few MiB from run to run
	// (measured 2 or 6 MiB over, alone; 4 in the full suite): 10%, or
	// 8 MiB where that is more.
	if slack := max(int64(0.1*float64(want)), 8<<20); after > want+slack {
		t.Fatalf("resident memory %d after release, want within %d of %d", after, slack, want)
	}
	// And the arena's bytes, written in every step, went back.
	if during-after < arena*9/10 {
		t.Fatalf("resident memory fell by %d at release, the arena is %d", during-after, arena)
	}
	if after >= during {
		t.Fatalf("resident memory did not fall: %d during, %d after", during, after)
	}
	// Training resumes after a release.
	if _, err := tr.Step(context.Background(), x, y); err != nil {
		t.Fatal(err)
	}
}
