package budget_test

import (
	"bufio"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/budget"
	"github.com/headroom-ml/headroom/cpu"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/internal/cpuid"
	"github.com/headroom-ml/headroom/internal/env"
	"github.com/headroom-ml/headroom/internal/testkit"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/transform"
	"github.com/headroom-ml/headroom/zoo"
)

// ratioTolerance is how far the cost model's bf16-mixed/fp32 ratio may be
// from the measured one, relatively: the model ranks plans, and within
// this it ranks the two precisions as the machine does.
const ratioTolerance = 0.10

// The cost model of a Zen 4 CPU with the native bf16 kernel estimates
// bf16-mixed's step against fp32's within ratioTolerance of the ratio
// measured there (testdata/bf16ratios.txt: the command, CPU and date),
// for gpt and rrdbnet at two batch sizes each: the first gains from
// native bf16 products (about 0.55-0.6), the second hardly at all (its
// convolutions run as float32 Winograd or direct kernels in both
// precisions, about 0.95-1.0). The estimates are computed here, on the
// steps as bench runs them (train.Config{Precision}), with the row of
// that CPU class whatever this machine is; the measurements are the
// file's.
func TestBF16RatiosMatchMeasured(t *testing.T) {
	if on, err := env.Bool(env.Winograd, true); err != nil || !on {
		t.Skip("Winograd is off ($" + env.Winograd + "): the kernels, and so the estimates, are not the measured ones")
	}
	if _, set := os.LookupEnv(env.ConvBF16); set {
		t.Skip("$" + env.ConvBF16 + " chooses other convolution kernels than the measured ones")
	}
	zen4 := cpuid.Features{AVX2: true, FMA: true, F16C: true, AVX512F: true, AVX512BW: true, AVX512VL: true, AVX512BF16: true}
	cost, row := budget.CPUCost(zen4, cpu.Capabilities{AVX512: true, NativeBF16: true})
	if row != "avx512-bf16 (native bf16 kernel)" {
		t.Fatalf("row %q: the measurements are of the avx512-bf16 row's CPUs", row)
	}
	cost = cost.On(device.Meta().Backend)
	f, err := os.Open("testdata/bf16ratios.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	rows := 0
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		fs := strings.Fields(line)
		if len(fs) < 5 {
			t.Fatalf("testdata/bf16ratios.txt: %q: want model, batch, fp32 and bf16 seconds, ratio", line)
		}
		batch, err1 := strconv.Atoi(fs[1])
		measured, err2 := strconv.ParseFloat(fs[4], 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("testdata/bf16ratios.txt: %q: %v %v", line, err1, err2)
		}
		rows++
		est := estimatedRatio(t, cost, fs[0], batch)
		if d := est/measured - 1; math.Abs(d) > ratioTolerance {
			t.Errorf("%s batch %d: bf16-mixed estimated at %.3f of fp32, measured %.3f (%+.0f%%, tolerance ±%.0f%%)", fs[0], batch, est, measured, 100*d, 100*ratioTolerance)
		} else {
			t.Logf("%s batch %d: estimated %.3f, measured %.3f (%+.1f%%)", fs[0], batch, est, measured, 100*d)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if rows < 4 {
		t.Fatalf("testdata/bf16ratios.txt: %d measurements, want gpt and rrdbnet at two batch sizes", rows)
	}
}

// estimatedRatio is cost's estimate of the bf16-mixed step of model at
// batch over its fp32 step, each compiled as bench compiles it.
func estimatedRatio(t *testing.T, cost budget.CostModel, model string, batch int) float64 {
	t.Helper()
	spec, err := zoo.Lookup(model)
	if err != nil {
		t.Fatal(err)
	}
	opt, err := optim.NewAdam(optim.AdamDefaults())
	if err != nil {
		t.Fatal(err)
	}
	tr := testkit.Trainer(t, device.Meta(), 0, testkit.Build(spec), opt)
	defer tr.Close()
	x, y := spec.Example(batch)
	var s [2]float64
	for i, p := range []transform.Precision{transform.FP32, transform.BF16Mixed} {
		_, comp, err := tr.PlanConfig(train.Config{Precision: p}, x, y)
		if err != nil {
			t.Fatal(err)
		}
		s[i] = cost.ForPrecision(p).Graph(comp.Program.Plan.Order)
	}
	return s[1] / s[0]
}
