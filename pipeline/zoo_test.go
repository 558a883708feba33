package pipeline_test

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"strings"
	"sync"
	"testing"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/exec"
	"github.com/headroom-ml/headroom/internal/testkit"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/pipeline"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/transform"
	"github.com/headroom-ml/headroom/zoo"
)

// zooCase is a small zoo model cut at its units, with the single-device
// model it must agree with.
type zooCase struct {
	name   string
	spec   zoo.Spec
	layers func() ([]pipeline.Layer, error)
	cuts2  []int // two stages
	cuts3  []int // three
}

func zooCases() []zooCase {
	rn := zoo.ResNetConfig{Block: zoo.Basic, Layers: [4]int{1, 1, 1, 1}, NumClasses: 10}
	bn := zoo.ResNetConfig{Block: zoo.Bottleneck, Layers: [4]int{1, 1, 1, 1}, NumClasses: 10}
	gpt := zoo.GPTConfig{NLayer: 3, NHead: 2, NEmbd: 16, BlockSize: 8, VocabSize: 11, Bias: true}
	rr := zoo.RRDBNetConfig{InNC: 3, OutNC: 3, NF: 8, NB: 3, GC: 4}
	resnet := func(name string, cfg zoo.ResNetConfig, hw int) zooCase {
		spec := zoo.Spec{Name: name, Loss: zoo.CrossEntropyLoss,
			New: func(b nn.Builder) train.Model { return zoo.NewResNet(b, cfg) },
			Example: func(n int) (trace.Meta, trace.Meta) {
				return trace.Meta{DType: tensor.Float32, Shape: tensor.Shape{n, 3, hw, hw}}, trace.Meta{DType: tensor.Int64, Shape: tensor.Shape{n}}
			}}
		return zooCase{name, spec, func() ([]pipeline.Layer, error) { return pipeline.ResNetLayers(cfg) }, []int{0, 2, 4}, []int{0, 1, 2, 4}}
	}
	return []zooCase{
		resnet("resnet", rn, 32),
		{"bottleneck", resnet("", bn, 32).spec, func() ([]pipeline.Layer, error) { return pipeline.ResNetLayers(bn) }, []int{0, 2, 4}, []int{0, 1, 2, 4}},
		{"gpt", zoo.Spec{Name: "gpt", Loss: zoo.GPTLoss,
			New: func(b nn.Builder) train.Model { return zoo.NewGPT(b, gpt) },
			Example: func(n int) (trace.Meta, trace.Meta) {
				m := trace.Meta{DType: tensor.Int64, Shape: tensor.Shape{n, gpt.BlockSize}}
				return m, m
			}}, func() ([]pipeline.Layer, error) { return pipeline.GPTLayers(gpt) }, []int{0, 2, 3}, []int{0, 1, 2, 3}},
		{"rrdbnet", zoo.Spec{Name: "rrdbnet", Loss: zoo.L1Loss,
			New: func(b nn.Builder) train.Model { return zoo.NewRRDBNet(b, rr) },
			Example: func(n int) (trace.Meta, trace.Meta) {
				return trace.Meta{DType: tensor.Float32, Shape: tensor.Shape{n, 3, 8, 8}}, trace.Meta{DType: tensor.Float32, Shape: tensor.Shape{n, 3, 32, 32}}
			}}, func() ([]pipeline.Layer, error) { return pipeline.RRDBNetLayers(rr) }, []int{0, 1, 3}, []int{0, 1, 2, 3}},
	}
}

// zooBatches are k batches of n samples of the case's shapes.
func zooBatches(c zooCase, k, n int) [][2]*tensor.Tensor {
	r := rand.New(rand.NewSource(5))
	x, y := c.spec.Example(n)
	var out [][2]*tensor.Tensor
	for range k {
		var bx, by *tensor.Tensor
		switch c.name {
		case "gpt":
			bx, by = testkit.Batch(r, x, y, 11)
			bx, _ = testkit.Batch(r, y, y, 11)
		case "rrdbnet":
			bx, by = testkit.Batch(r, x, trace.Meta{DType: tensor.Int64, Shape: tensor.Shape{n}}, 2)
			by = tensor.New(tensor.Float32, y.Shape)
			for i, v := range by.F32() {
				_ = v
				by.F32()[i] = float32(r.NormFloat64())
			}
		default:
			bx, by = testkit.Batch(r, x, y, 10)
		}
		out = append(out, [2]*tensor.Tensor{bx, by})
	}
	return out
}

// zooOneDevice trains the zoo model itself on one device, the batch
// split into micro micro-batches as a pipeline splits it (batch norm
// normalizes each micro-batch alone), and returns its initial and final
// weights and its losses.
func zooOneDevice(t *testing.T, c zooCase, micro int, data [][2]*tensor.Tensor) (init, final map[string]*tensor.Tensor, losses []float64) {
	t.Helper()
	dev := device.CPU()
	s := nn.NewStore()
	m := c.spec.New(s.Root())
	if err := s.Materialize(dev, 1); err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	init = s.StateDict()
	opt, _ := sgd()
	tr, err := train.NewConfig(dev, s, m, c.spec.Loss, opt, train.Config{Accumulation: micro})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	for _, b := range data {
		l, err := tr.Step(context.Background(), b[0], b[1])
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, l)
	}
	return init, s.StateDict(), losses
}

// zooRanks trains data on the ranks of comm.Run, stage r on rank r, and
// returns rank 0's losses, each rank's final trainable weights, plans
// and measured peaks.
func zooRanks(t *testing.T, c zooCase, cuts []int, sched pipeline.Schedule, micro int, init map[string]*tensor.Tensor, data [][2]*tensor.Tensor) (losses []float64, final []map[string][]float32, plans [][]pipeline.StagePlan, peaks [][]int64) {
	t.Helper()
	ls, err := c.layers()
	if err != nil {
		t.Fatal(err)
	}
	return pipelineRanks(t, ls, c.spec.Loss, sgd, cuts, sched, micro, init, data)
}

// sgd is plain SGD: a weight's change over the steps is the learning
// rate times its gradients' sum, which checkWeights compares (Adam's
// first steps are about the gradient's sign, and batch norm over a
// micro-batch of two 1x1 maps leaves gradients whose sign is rounding).
func sgd() (optim.Optimizer, error) { return optim.NewSGD(optim.SGDConfig{LR: 0.1}) }

// checkWeights compares every stage's weights' change from init with
// one device's (the gradients, summed over the steps): every parameter
// is on some stage (when final are all the stages), and a tied one (the GPT's token embedding, on the
// first and last) changes as one device's on each.
func checkWeights(t *testing.T, final []map[string][]float32, init, want map[string]*tensor.Tensor, tol float64, all bool) {
	t.Helper()
	delta := func(a []float32, b *tensor.Tensor) []float32 {
		d := make([]float32, len(a))
		for i, v := range b.F32() {
			d[i] = a[i] - v
		}
		return d
	}
	worst := 0.0
	held := map[string]int{}
	for _, w := range final {
		for name, v := range w {
			ref, ok := want[name]
			if !ok {
				t.Fatalf("a stage holds %s, which the model has not", name)
			}
			held[name]++
			d := relDiff(delta(v, init[name]), delta(ref.F32(), init[name]))
			if d > tol {
				t.Logf("%s: %.3g", name, d)
			}
			worst = max(worst, d)
		}
	}
	for name, ref := range want {
		if _, ok := held[name]; all && !ok && ref.DType == tensor.Float32 && !isBuffer(name) {
			t.Errorf("no stage holds %s", name)
		}
	}
	t.Logf("weights' changes within %.3g of one device's", worst)
	if worst > tol {
		t.Errorf("weights differ from one device's by %.3g relative", worst)
	}
}

func isBuffer(name string) bool {
	for _, s := range []string{"running_mean", "running_var", "num_batches_tracked"} {
		if len(name) >= len(s) && name[len(name)-len(s):] == s {
			return true
		}
	}
	return false
}

// The zoo's ResNets (basic and bottleneck blocks), a GPT (its token
// embedding tied to the LM head on the first and last stages) and
// RRDBNet (its trunk-long skip carried with the activation), cut at
// their units onto 2 and 3 ranks under GPipe and 1F1B, train as the zoo
// model does on one device: losses within 1e-5 relative and weights
// after the steps within float tolerance; each rank's measured peak
// equals its plan at every step.
func TestZooRanksMatchOneDevice(t *testing.T) {
	for _, c := range zooCases() {
		t.Run(c.name, func(t *testing.T) {
			const micro = 4
			data := zooBatches(c, 1, 8)
			init, want, wantLoss := zooOneDevice(t, c, micro, data)
			for _, tc := range []struct {
				cuts  []int
				sched pipeline.Schedule
			}{{c.cuts2, pipeline.GPipe}, {c.cuts3, pipeline.OneFOneB}, {c.cuts3, pipeline.GPipe}, {c.cuts2, pipeline.OneFOneB}} {
				t.Run(fmt.Sprint(tc.cuts, tc.sched), func(t *testing.T) {
					if testing.Short() && (tc.sched == pipeline.GPipe) != (len(tc.cuts) == 3) {
						t.Skip("one configuration of each schedule in -short")
					}
					losses, final, plans, peaks := zooRanks(t, c, tc.cuts, tc.sched, micro, init, data)
					for i, l := range losses {
						if math.Abs(l-wantLoss[i]) > 1e-5*math.Abs(wantLoss[i]) {
							t.Errorf("step %d: loss %v, one device %v", i, l, wantLoss[i])
						}
					}
					checkWeights(t, final, init, want, 1e-4, true)
					checkPeaks(t, plans, peaks)
				})
			}
		})
	}
}

// In one process (pipeline.New, a device per stage) the cut zoo models
// train as one device does too, and each device's peak equals its plan.
func TestZooDevicesMatchOneDevice(t *testing.T) {
	for _, c := range zooCases() {
		t.Run(c.name, func(t *testing.T) {
			const micro = 4
			data := zooBatches(c, 1, 8)
			init, want, wantLoss := zooOneDevice(t, c, micro, data)
			ls, err := c.layers()
			if err != nil {
				t.Fatal(err)
			}
			for _, sched := range []pipeline.Schedule{pipeline.GPipe, pipeline.OneFOneB} {
				devs := []*device.Device{device.CPU(), device.CPU(), device.CPU()}
				p, err := pipeline.New(ls, c.spec.Loss, c.cuts3, devs, sgd, micro, 9)
				if err != nil {
					t.Fatal(err)
				}
				p.Schedule = sched
				if err := p.Load(init); err != nil {
					t.Fatal(err)
				}
				for i, b := range data {
					sp, err := p.Plan(train.MetaOf(b[0]), train.MetaOf(b[1]))
					if err != nil {
						t.Fatal(err)
					}
					for _, d := range devs {
						d.Alloc.ResetPeak()
					}
					l, err := p.Step(context.Background(), b[0], b[1])
					if err != nil {
						t.Fatal(err)
					}
					if math.Abs(l-wantLoss[i]) > 1e-5*math.Abs(wantLoss[i]) {
						t.Errorf("%v step %d: loss %v, one device %v", sched, i, l, wantLoss[i])
					}
					for s, d := range devs {
						if got := d.Alloc.MaxMemoryAllocated(); got != sp[s].Peak {
							t.Errorf("%v step %d, stage %d: measured peak %d, planned %d", sched, i, s, got, sp[s].Peak)
						}
					}
				}
				var final []map[string][]float32
				for _, st := range p.Stages {
					w := map[string][]float32{}
					for _, q := range st.Store.Trainable() {
						w[q.Name] = q.Value.F32()
					}
					final = append(final, w)
				}
				checkWeights(t, final, init, want, 1e-4, true)
				p.Close()
			}
		})
	}
}

// On 3 ranks with 6 micro-batches, 1F1B holds fewer inputs than GPipe
// and peaks lower on every rank, for the cut zoo models too; both peaks
// equal their plans.
func TestZooOneFOneBBelowGPipe(t *testing.T) {
	for _, c := range zooCases() {
		if c.name == "bottleneck" || testing.Short() && c.name == "resnet" {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			data := zooBatches(c, 1, 12)
			got := map[pipeline.Schedule][][]pipeline.StagePlan{}
			for _, sched := range []pipeline.Schedule{pipeline.GPipe, pipeline.OneFOneB} {
				_, _, plans, peaks := zooRanks(t, c, c.cuts3, sched, 6, nil, data)
				checkPeaks(t, plans, peaks)
				got[sched] = plans
			}
			for r := range 3 {
				g, o := got[pipeline.GPipe][r][0], got[pipeline.OneFOneB][r][0]
				t.Logf("rank %d: 1F1B inputs %d peak %d, GPipe inputs %d peak %d", r, o.Inputs, o.Peak, g.Inputs, g.Peak)
				if !(o.Inputs < g.Inputs && o.Peak < g.Peak) {
					t.Errorf("rank %d: 1F1B inputs %d peak %d, GPipe inputs %d peak %d", r, o.Inputs, o.Peak, g.Inputs, g.Peak)
				}
			}
		})
	}
}

// A GPT's stages initialized from the seed alone (no Load) start with
// the token embedding of the first stage on the last too, and the two
// copies stay equal, bit for bit, while they train.
func TestGPTTiedCopiesStayEqual(t *testing.T) {
	var c zooCase
	for _, z := range zooCases() {
		if z.name == "gpt" {
			c = z
		}
	}
	for _, cuts := range [][]int{c.cuts2, c.cuts3} {
		_, final, _, _ := zooRanks(t, c, cuts, pipeline.OneFOneB, 2, nil, zooBatches(c, 2, 4))
		const wte = "transformer.wte.weight"
		a, b := final[0][wte], final[len(final)-1][wte]
		if a == nil || b == nil {
			t.Fatalf("cuts %v: the first and last stages hold %s: %v, %v", cuts, wte, a != nil, b != nil)
		}
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("cuts %v: %s[%d] is %v on the first stage, %v on the last", cuts, wte, i, a[i], b[i])
			}
		}
	}
}

// StateDict gathers every rank's stage on rank 0: the whole zoo model's
// parameters and buffers (batch norm's int64 counters too, bit for bit),
// which load strictly into the single-device model.
func TestZooRanksStateDict(t *testing.T) {
	for _, c := range zooCases() {
		if c.name != "resnet" && c.name != "gpt" {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			ls, err := c.layers()
			if err != nil {
				t.Fatal(err)
			}
			data := zooBatches(c, 1, 4)
			var mu sync.Mutex
			own := map[string]*tensor.Tensor{}
			var got map[string]*tensor.Tensor
			err = comm.Run(context.Background(), 3, func(ctx context.Context, cm comm.Comm) error {
				p, err := pipeline.NewRank(cm, ls, c.spec.Loss, c.cuts3, device.CPU(), sgd, 2, 9)
				if err != nil {
					return err
				}
				defer p.Close()
				if _, err := p.Step(ctx, data[0][0], data[0][1]); err != nil {
					return err
				}
				sd, err := p.StateDict(ctx)
				if err != nil {
					return err
				}
				mu.Lock()
				defer mu.Unlock()
				for _, q := range p.Stages[0].Store.Params() {
					own[q.Name] = q.Value.Clone()
				}
				if cm.Rank() == 0 {
					got = sd
				} else if sd != nil {
					return fmt.Errorf("rank %d returned a state dict", cm.Rank())
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			s := nn.NewStore()
			c.spec.New(s.Root())
			if err := s.Materialize(device.CPU(), 1); err != nil {
				t.Fatal(err)
			}
			defer s.Release()
			if err := s.LoadStateDict(got, true); err != nil {
				t.Fatal(err)
			}
			if len(got) != len(s.Params()) {
				t.Errorf("%d tensors gathered, the model has %d", len(got), len(s.Params()))
			}
			for name, v := range own {
				if string(got[name].Data) != string(v.Data) {
					t.Errorf("%s gathered differs from its stage's", name)
				}
			}
		})
	}
}

// A ResNet's batch-norm running statistics are updated once per
// micro-batch on every stage, as on one device (a stage's backward pass
// recomputes its forward pass and would update them again): under 1F1B,
// whose stages all run the micro-batches in order, they equal one
// device's accumulating over the same micro-batches.
func TestZooRanksBatchNormStatistics(t *testing.T) {
	c := zooCases()[0]
	const micro = 4
	data := zooBatches(c, 1, 8)
	init, want, _ := zooOneDevice(t, c, micro, data)
	ls, err := c.layers()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	got := map[string]*tensor.Tensor{}
	err = comm.Run(context.Background(), 3, func(ctx context.Context, cm comm.Comm) error {
		p, err := pipeline.NewRank(cm, ls, c.spec.Loss, c.cuts3, device.CPU(), sgd, micro, 9)
		if err != nil {
			return err
		}
		defer p.Close()
		p.Schedule = pipeline.OneFOneB
		if err := p.Load(init); err != nil {
			return err
		}
		if _, err := p.Step(ctx, data[0][0], data[0][1]); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, q := range p.Stages[0].Store.Params() {
			if !q.Trainable {
				got[q.Name] = q.Value.Clone()
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 {
		t.Fatal("no buffers")
	}
	for name, v := range got {
		w := want[name]
		if v.DType != tensor.Float32 {
			if string(v.Data) != string(w.Data) {
				t.Errorf("%s: %v, one device %v", name, v.I64(), w.I64())
			}
			continue
		}
		if d := relDiff(v.F32(), w.F32()); d > 1e-5 {
			t.Errorf("%s differs from one device's by %.3g relative", name, d)
		}
	}
}

// Evaluate on ranks is the single-device model's loss in evaluation
// mode (a ResNet's batch norm on its running statistics, which differ
// from the batch's), before and after a training step; the plans of the
// steps after evaluations still equal the measured peaks.
func TestZooRanksEvaluate(t *testing.T) {
	for _, c := range zooCases() {
		if c.name != "resnet" && c.name != "gpt" {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			data := zooBatches(c, 2, 6)
			dev := device.CPU()
			s := nn.NewStore()
			m := c.spec.New(s.Root())
			if err := s.Materialize(dev, 1); err != nil {
				t.Fatal(err)
			}
			defer s.Release()
			init := s.StateDict()
			// A ResNet's running statistics as a trained model's, not
			// the initial 0 and 1 that would make evaluation training.
			for name, v := range init {
				if strings.HasSuffix(name, "running_var") {
					for i := range v.F32() {
						v.F32()[i] = 0.5 + float32(i%7)/4
					}
				}
			}
			if err := s.LoadStateDict(init, true); err != nil {
				t.Fatal(err)
			}
			s.SetTraining(false)
			evalLoss := func(x, y *tensor.Tensor) float64 {
				g := trace.New()
				err := trace.Capture(func() {
					g.Output("loss", c.spec.Loss(m.Forward(g.Input("x", x.DType, x.Shape)), g.Input("y", y.DType, y.Shape)))
				})
				if err != nil {
					t.Fatal(err)
				}
				g, _, err = transform.Run(g, transform.Options{})
				if err != nil {
					t.Fatal(err)
				}
				prog, err := exec.Compile(g, dev)
				if err != nil {
					t.Fatal(err)
				}
				a := exec.NewArena(dev)
				defer a.Release()
				res, err := prog.Run(context.Background(), a, s, map[string]*tensor.Tensor{"x": x, "y": y}, nil)
				if err != nil {
					t.Fatal(err)
				}
				return res["loss"].Float64s()[0]
			}
			want := evalLoss(data[1][0], data[1][1])
			ls, err := c.layers()
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var got []float64
			var plans [][]pipeline.StagePlan
			var peaks [][]int64
			plans, peaks = make([][]pipeline.StagePlan, 3), make([][]int64, 3)
			err = comm.Run(context.Background(), 3, func(ctx context.Context, cm comm.Comm) error {
				r := cm.Rank()
				dev := device.CPU()
				p, err := pipeline.NewRank(cm, ls, c.spec.Loss, c.cuts3, dev, sgd, 3, 9)
				if err != nil {
					return err
				}
				defer p.Close()
				p.Schedule = pipeline.OneFOneB
				if err := p.Load(init); err != nil {
					return err
				}
				var losses []float64
				for range 2 {
					l, err := p.Evaluate(ctx, data[1][0], data[1][1])
					if err != nil {
						return err
					}
					losses = append(losses, l)
					sp, err := p.Plan(train.MetaOf(data[0][0]), train.MetaOf(data[0][1]))
					if err != nil {
						return err
					}
					dev.Alloc.ResetPeak()
					if _, err := p.Step(ctx, data[0][0], data[0][1]); err != nil {
						return err
					}
					mu.Lock()
					plans[r] = append(plans[r], sp[0])
					peaks[r] = append(peaks[r], dev.Alloc.MaxMemoryAllocated())
					mu.Unlock()
				}
				mu.Lock()
				defer mu.Unlock()
				if r == 0 {
					got = losses
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("evaluation losses %v, one device before training %v", got, want)
			if math.Abs(got[0]-want) > 1e-5*math.Abs(want) {
				t.Errorf("evaluation loss %v, one device's %v", got[0], want)
			}
			if got[1] == got[0] {
				t.Errorf("the evaluation after a step did not change: %v", got)
			}
			checkPeaks(t, plans, peaks)
		})
	}
}
