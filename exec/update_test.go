package exec_test

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/exec"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// An optimizer step node hands the parameter and its gradient to
// Options.Update; it does not when the loss is not finite, nor on the meta
// device, nor when the arena cannot be had: the arena is reserved before
// the first node runs, so an out-of-memory comes before any update.
func TestOptimizerStepNode(t *testing.T) {
	const n = 1 << 18 // 1 MiB of float32s per buffer
	g := trace.New()
	err := trace.Capture(func() {
		x := g.Input("x", tensor.Float32, tensor.Shape{n})
		w := g.State("w", "parameter", tensor.Float32, tensor.Shape{n})
		loss := op.Sum(op.Mul(w, x), false)
		g.Output("loss", loss)
		prim.StepInBackward(w, op.Exp(x), loss, "w")
	})
	if err != nil {
		t.Fatal(err)
	}
	x := tensor.New(tensor.Float32, tensor.Shape{n})
	for i := range x.F32() {
		x.F32()[i] = float32(i%7) / 7
	}
	nan := tensor.New(tensor.Float32, tensor.Shape{n})
	copy(nan.Data, x.Data)
	nan.F32()[5] = float32(math.NaN())
	w := tensor.New(tensor.Float32, tensor.Shape{n})
	cases := []struct {
		name    string
		dev     string
		x       *tensor.Tensor
		bind    bool
		calls   int
		wantErr func(error) bool
	}{
		{"runs", "cpu", x, true, 1, nil},
		{"non-finite loss", "cpu", nan, true, 0, func(err error) bool {
			var e *exec.NonFiniteLossError
			return errors.As(err, &e) && math.IsNaN(e.Loss)
		}},
		{"no optimizer bound", "cpu", x, false, 0, func(err error) bool { return err != nil }},
		{"out of memory", "cpu:mem=2MiB", x, true, 0, func(err error) bool { return errors.Is(err, device.ErrOutOfMemory) }},
		{"meta", "meta", x, true, 0, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dev, err := device.New(c.dev)
			if err != nil {
				t.Fatal(err)
			}
			p, err := exec.Compile(g, dev)
			if err != nil {
				t.Fatal(err)
			}
			calls := 0
			opts := &exec.Options{}
			if c.bind {
				opts.Update = func(param string, value, grad *tensor.Tensor) error {
					calls++
					if param != "w" || &value.Data[0] != &w.Data[0] {
						t.Errorf("update of %q, not of w's storage", param)
					}
					for i, v := range grad.F32() {
						if want := float32(math.Exp(float64(x.F32()[i]))); math.Abs(float64(v-want)) > 1e-6*float64(want) {
							t.Fatalf("gradient[%d] = %v, want %v", i, v, want)
						}
					}
					return nil
				}
			}
			_, err = p.Run(context.Background(), exec.NewArena(dev), exec.StateMap{"w": w}, map[string]*tensor.Tensor{"x": c.x}, opts)
			if c.wantErr == nil && err != nil || c.wantErr != nil && !c.wantErr(err) {
				t.Fatalf("error %v", err)
			}
			if calls != c.calls {
				t.Fatalf("%d updates, want %d", calls, c.calls)
			}
		})
	}
}
