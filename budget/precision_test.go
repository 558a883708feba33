package budget_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/budget"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/internal/testkit"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/transform"
)

// wideConv has few parameters and large activations: at one sample per
// micro-batch the saved activations, not the persistent state, decide the
// smallest budget, so precision and compression move it.
type wideConv struct {
	c1, c2, c3 *nn.Conv2d
	fc         *nn.Linear
}

func newWideConv(b nn.Builder) *wideConv {
	pad := op.ConvOpts{Padding: [2]int{1, 1}}
	return &wideConv{
		c1: nn.NewConv2d(b.Sub("c1"), 3, 16, 3, pad, true),
		c2: nn.NewConv2d(b.Sub("c2"), 16, 16, 3, pad, true),
		c3: nn.NewConv2d(b.Sub("c3"), 16, 16, 3, pad, true),
		fc: nn.NewLinear(b.Sub("fc"), 16, 10, true),
	}
}

func (m *wideConv) Forward(x *trace.Tensor) *trace.Tensor {
	x = op.ReLU(m.c1.Forward(x))
	x = op.ReLU(m.c2.Forward(x))
	x = op.ReLU(m.c3.Forward(x))
	x = op.AdaptiveAvgPool2d(x, [2]int{1, 1})
	return m.fc.Forward(op.Reshape(x, tensor.Shape{x.Dim(0), 16}))
}

func wideProblem(batch int, b int64, precs []transform.Precision, comps []transform.Compression) budget.Problem {
	return budget.Problem{
		Build: func(s *nn.Store) (train.Model, train.LossFunc) {
			return newWideConv(s.Root()), func(out, y *trace.Tensor) *trace.Tensor {
				return op.CrossEntropy(out, y, op.DefaultCrossEntropyOpts())
			}
		},
		Example: func(n int) (trace.Meta, trace.Meta) {
			return trace.Meta{DType: tensor.Float32, Shape: tensor.Shape{n, 3, 64, 64}}, trace.Meta{DType: tensor.Int64, Shape: tensor.Shape{n}}
		},
		Batch: batch, Budget: b, Precisions: precs, Compress: comps,
		NewOptimizer: func() (optim.Optimizer, error) { return optim.NewAdam(optim.AdamDefaults()) },
		// Precisions compared with the gradients held apart in each.
		GradientBuffers: true,
	}
}

var (
	fp32Only  = []transform.Precision{transform.FP32}
	mixed     = []transform.Precision{transform.FP32, transform.BF16Mixed}
	keep      = []transform.Compression{{}}
	autoPrecs = budget.AutoPrecisions
	autoComps = budget.AutoCompress
)

// minimum is the smallest budget Fit names for p.
func minimum(t *testing.T, p budget.Problem) int64 {
	t.Helper()
	p.Budget = 1
	_, err := budget.Fit(context.Background(), p)
	var ts *budget.TooSmallError
	if !errors.As(err, &ts) {
		t.Fatalf("a 1-byte budget: %v", err)
	}
	return ts.Minimum
}

// The planner picks a lower precision or compressed saved activations
// where they are allowed and needed, and changes numerics nowhere else.
func TestPlannerChoosesPrecisionAndCompression(t *testing.T) {
	const batch = 4
	fp32Min := minimum(t, wideProblem(batch, 0, fp32Only, keep))
	mixedMin := minimum(t, wideProblem(batch, 0, mixed, keep))
	compMin := minimum(t, wideProblem(batch, 0, fp32Only, autoComps))
	if mixedMin >= fp32Min || compMin >= fp32Min {
		t.Fatalf("minimum budgets: fp32 %d, with bf16-mixed %d, with compression %d: the test needs both below fp32's", fp32Min, mixedMin, compMin)
	}
	// Where fp32 holds the batch only with help (micro-batches or
	// recomputation): halfway between its minimum and the smallest budget
	// that holds the whole batch in one pass with nothing recomputed.
	lo, hi := fp32Min, int64(1<<30)
	for hi-lo > 4096 {
		mid := (lo + hi) / 2
		n, err := budget.MaxBatch(context.Background(), wideProblem(batch, mid, nil, nil), budget.RecomputeNone)
		if err != nil {
			t.Fatal(err)
		}
		if n == batch {
			hi = mid
		} else {
			lo = mid
		}
	}
	tight := (fp32Min + lo) / 2
	fallback, err := budget.Fit(context.Background(), wideProblem(batch, tight, fp32Only, keep))
	if err != nil {
		t.Fatal(err)
	}

	lowered := func(c budget.Choice) bool { return c.Precision != transform.FP32 || c.Compression != "none" }
	for _, tc := range []struct {
		name   string
		precs  []transform.Precision
		comps  []transform.Compression
		budget int64
		check  func(t *testing.T, r *budget.Result, err error)
	}{
		{"fp32 only, below its minimum", fp32Only, keep, fp32Min - 1, func(t *testing.T, r *budget.Result, err error) {
			var ts *budget.TooSmallError
			if !errors.As(err, &ts) || ts.Minimum != fp32Min {
				t.Fatalf("want TooSmallError naming %d, got %v", fp32Min, err)
			}
		}},
		{"bf16-mixed allowed, below fp32's minimum", mixed, keep, fp32Min - 1, func(t *testing.T, r *budget.Result, err error) {
			if err != nil {
				t.Fatal(err)
			}
			if r.Best.Precision != transform.BF16Mixed || r.Best.Rounded == 0 {
				t.Fatalf("chose %s (%d values rounded), want bf16-mixed", r.Best.Describe(), r.Best.Rounded)
			}
		}},
		{"compression allowed, below fp32's minimum", fp32Only, autoComps, fp32Min - 1, func(t *testing.T, r *budget.Result, err error) {
			if err != nil {
				t.Fatal(err)
			}
			if r.Best.Precision != transform.FP32 || r.Best.Compression == "none" || r.Best.Compress == nil {
				t.Fatalf("chose %s, want fp32 with compressed saved activations", r.Best.Describe())
			}
			if st := r.Best.Saved; st.After >= st.Before {
				t.Fatalf("compression stores %d bytes in %d", st.Before, st.After)
			}
		}},
		{"auto, below fp32's minimum", autoPrecs, autoComps, fp32Min - 1, func(t *testing.T, r *budget.Result, err error) {
			if err != nil {
				t.Fatal(err)
			}
			if !lowered(r.Best) {
				t.Fatalf("chose %s", r.Best.Describe())
			}
		}},
		{"fp32 only, whole batch does not fit: micro-batches or recomputation", fp32Only, keep, tight, func(t *testing.T, r *budget.Result, err error) {
			if err != nil {
				t.Fatal(err)
			}
			if lowered(r.Best) || r.Best.Accumulation == 1 && r.Best.Recomputed == 0 {
				t.Fatalf("chose %s", r.Best.Describe())
			}
		}},
		{"auto where fp32 fits with help: never slower", autoPrecs, autoComps, tight, func(t *testing.T, r *budget.Result, err error) {
			if err != nil {
				t.Fatal(err)
			}
			if r.Best.Time > fallback.Best.Time {
				t.Fatalf("chose %s (est. %g s), slower than fp32's %s (est. %g s)", r.Best.Describe(), r.Best.Time, fallback.Best.Describe(), fallback.Best.Time)
			}
		}},
		// Nothing is needed to fit, so nothing that costs time: one pass,
		// nothing recomputed, and bf16-mixed only where the cost model
		// makes it faster than fp32 (where the CPU multiplies bf16
		// natively: this model's first convolution and its linear layer).
		{"auto where the whole batch fits in fp32: nothing slower", autoPrecs, autoComps, 1 << 40, func(t *testing.T, r *budget.Result, err error) {
			if err != nil {
				t.Fatal(err)
			}
			if r.Best.Accumulation != 1 || r.Best.Recomputed != 0 || r.Slowdown() > 1 || lowered(r.Best) && r.Slowdown() >= 1 {
				t.Fatalf("chose %s, slowdown %g", r.Best.Describe(), r.Slowdown())
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := budget.Fit(context.Background(), wideProblem(batch, tc.budget, tc.precs, tc.comps))
			tc.check(t, r, err)
			if err == nil {
				if !r.Best.Fits || r.Best.Reserved > tc.budget {
					t.Fatalf("best %s reserves %d of %d (fits %v)", r.Best.Describe(), r.Best.Reserved, tc.budget, r.Best.Fits)
				}
				t.Logf("budget %d: %s, est. %.2fx", tc.budget, r.Best.Describe(), r.Slowdown())
			}
		})
	}
}

// The minimum named for a search space that allows precision and
// compression is exact: accepted at Minimum, refused at Minimum-1, from a
// budget below the persistent state as from one above it.
func TestMinimumExactWithPrecision(t *testing.T) {
	for _, tc := range []struct {
		name  string
		precs []transform.Precision
		comps []transform.Compression
	}{
		{"fp32", fp32Only, keep},
		{"bf16-mixed", mixed, keep},
		{"compression", fp32Only, autoComps},
		{"auto", autoPrecs, autoComps},
		{"fp16-mixed and offload by name", []transform.Precision{transform.FP16Mixed}, []transform.Compression{{To: transform.Offload, MinBytes: transform.DefaultMinBytes, Masks: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := wideProblem(4, 0, tc.precs, tc.comps)
			min := minimum(t, p)
			for _, b := range []int64{min - 1, min - 512<<10} {
				p.Budget = b
				_, err := budget.Fit(context.Background(), p)
				var ts *budget.TooSmallError
				if !errors.As(err, &ts) || ts.Minimum != min {
					t.Fatalf("budget %d: want TooSmallError naming %d, got %v", b, min, err)
				}
			}
			p.Budget = min
			if _, err := budget.Fit(context.Background(), p); err != nil {
				t.Fatalf("the named minimum %d is refused: %v", min, err)
			}
		})
	}
}

// A budget below what parameters, gradients and optimizer state allocate
// is refused before any search, naming the same minimum as a search would.
func TestBelowPersistentStateRefusedAtOnce(t *testing.T) {
	p := cnnProblem(32, 1)
	p.Precisions, p.Compress = autoPrecs, autoComps
	_, err := budget.Fit(context.Background(), p)
	var ts *budget.TooSmallError
	if !errors.As(err, &ts) || !strings.Contains(ts.Reason, "optimizer state alone") || ts.Persistent <= 1 {
		t.Fatalf("want TooSmallError about the persistent state, got %v", err)
	}
	p.Budget = ts.Minimum - 1
	_, err = budget.Fit(context.Background(), p)
	var ts2 *budget.TooSmallError
	if !errors.As(err, &ts2) || ts2.Minimum != ts.Minimum {
		t.Fatalf("one byte below the minimum %d: %v", ts.Minimum, err)
	}
	if ts.Persistent >= ts.Minimum {
		t.Fatalf("persistent state %d, minimum %d", ts.Persistent, ts.Minimum)
	}
}

// Plans with a chosen precision and compression run on a cpu device capped
// at the budget without running out of memory, within the planned peak.
func TestAcceptedPrecisionPlansRun(t *testing.T) {
	const batch = 4
	r := rand.New(rand.NewSource(1))
	autoMin := minimum(t, wideProblem(batch, 0, autoPrecs, autoComps))
	fp32Min := minimum(t, wideProblem(batch, 0, fp32Only, keep))
	for _, b := range []int64{autoMin, (autoMin + fp32Min) / 2, fp32Min - 1} {
		res, err := budget.Fit(context.Background(), wideProblem(batch, b, autoPrecs, autoComps))
		if err != nil {
			t.Fatal(err)
		}
		t.Run(fmt.Sprintf("%s %s", device.FormatBytes(b), res.Best.Describe()), func(t *testing.T) {
			dev, err := device.New(fmt.Sprintf("cpu:mem=%d", b))
			if err != nil {
				t.Fatal(err)
			}
			opt, _ := optim.NewAdam(optim.AdamDefaults())
			tr, err := train.Setup(dev, 1, wideProblem(1, 0, nil, nil).Build, opt)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			res.Best.Apply(tr)
			for step := 0; step < 2; step++ {
				x, y := testkit.Classification(r, tensor.Shape{batch, 3, 64, 64}, 10)
				parts, err := train.Split(train.Batch{X: x, Y: y}, res.Best.Accumulation)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := tr.StepAccumulate(context.Background(), parts); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
			}
			st := dev.Alloc.Stats()
			if st.NumOOMs != 0 || tr.Splits != 0 || st.AllocatedBytes.Peak > res.Best.Memory.Total() || st.ReservedBytes.Peak > b {
				t.Fatalf("peak %d (planned %d), reserved %d of %d, %d OOMs, %d splits",
					st.AllocatedBytes.Peak, res.Best.Memory.Total(), st.ReservedBytes.Peak, b, st.NumOOMs, tr.Splits)
			}
		})
	}
}

// The cost model charges what emulated low precision and compression add:
// every rounding and every compression pass, at the measured rate of
// format conversions (ReLU bit masks, vectorized, are charged as the
// memory-bound elementwise ops they are).
func TestCostChargesRoundingAndCompression(t *testing.T) {
	cost := func(prec transform.Precision, comp string) (total, conv float64) {
		opt, _ := optim.NewAdam(optim.AdamDefaults())
		tr, err := train.Setup(device.Meta(), 0, wideProblem(1, 0, nil, nil).Build, opt)
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		cp, _ := transform.ParseCompress(comp)
		st, _ := train.StorageOf(cp)
		if err := tr.SetConfig(train.Config{Precision: prec, Storage: st}); err != nil {
			t.Fatal(err)
		}
		x, y := wideProblem(1, 0, nil, nil).Example(4)
		p, err := tr.TrainProgram(x, y)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range p.Plan.Order {
			switch n.Op.(type) {
			case *prim.Cast, *prim.Round, *prim.Quantize, *prim.Dequantize:
				conv += budget.DefaultCost.Node(n)
				elems := float64(max(n.Inputs[0].Shape().NumElements(), n.Outputs[0].Shape().NumElements()))
				if min := elems / 2 / budget.DefaultCost.Convert; budget.DefaultCost.Node(n) < min {
					t.Errorf("%s over %g elements costs %g s, less than half a conversion pass (%g s)", n.Label(), elems, budget.DefaultCost.Node(n), min)
				}
			}
		}
		return budget.DefaultCost.Graph(p.Plan.Order), conv
	}
	base, _ := cost(transform.FP32, "none")
	for _, tc := range []struct {
		prec transform.Precision
		comp string
	}{{transform.BF16Mixed, "none"}, {transform.FP32, "bf16"}, {transform.FP32, "int8"}, {transform.BF16Mixed, "int8"}} {
		total, conv := cost(tc.prec, tc.comp)
		if conv == 0 || total < base+0.9*conv {
			t.Errorf("%v + %s: %g s, fp32 %g s, conversions %g s: not charged", tc.prec, tc.comp, total, base, conv)
		}
	}
}

func TestParsePrecisionsAndCompressions(t *testing.T) {
	for _, tc := range []struct {
		in    string
		parse func(string) ([]string, error) // names of what it parsed
		want  []string
		err   string
	}{
		{"auto", precNames, budget.Names(budget.AutoPrecisions), ""},
		{"fp32", precNames, []string{"fp32"}, ""},
		{"fp16-mixed, bf16-true,fp16-mixed", precNames, []string{"fp16-mixed", "bf16-true"}, ""},
		{"fp8", precNames, nil, "valid: auto, fp32, bf16-mixed, fp16-mixed, bf16-true"},
		{"", precNames, nil, "valid"},
		{"auto", compNames, budget.Names(budget.AutoCompress), ""},
		{"int8,offload", compNames, []string{"int8", "offload"}, ""},
		{"zstd", compNames, nil, "valid: auto, none, masks, bf16, fp16, int8, offload"},
	} {
		got, err := tc.parse(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want one containing %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%q: %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func precNames(s string) ([]string, error) {
	ps, err := budget.ParsePrecisions(s)
	return budget.Names(ps), err
}

func compNames(s string) ([]string, error) {
	cs, err := budget.ParseCompressions(s)
	return budget.Names(cs), err
}
