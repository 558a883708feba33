package exec_test

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/exec"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// Options.Finish sees the outputs as views of the arena while they are
// still counted live (the allocator's current bytes are the plan's last
// step's), may keep some for itself (left out of the results, not copied),
// and its error ends the run; on the meta device it gets outputs without
// data.
func TestFinish(t *testing.T) {
	const n = 1 << 16
	g := trace.New()
	err := trace.Capture(func() {
		x := g.Input("x", tensor.Float32, tensor.Shape{n})
		g.Output("loss", op.Sum(x, false))
		g.Output("grad", op.Exp(x))
	})
	if err != nil {
		t.Fatal(err)
	}
	x := tensor.New(tensor.Float32, tensor.Shape{n})
	for i := range x.F32() {
		x.F32()[i] = float32(i%5) / 5
	}
	stop := errors.New("stop")
	for _, c := range []struct {
		name string
		dev  string
		keep bool  // Finish takes "grad" out
		err  error // Finish's error
	}{
		{"copies all", "cpu", false, nil},
		{"keeps grad", "cpu", true, nil},
		{"error", "cpu", true, stop},
		{"meta", "meta", true, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			dev, err := device.New(c.dev)
			if err != nil {
				t.Fatal(err)
			}
			p, err := exec.Compile(g, dev)
			if err != nil {
				t.Fatal(err)
			}
			arena := exec.NewArena(dev)
			last := p.Plan.LiveAt[len(p.Plan.Order)-1]
			var kept *tensor.Tensor
			calls := 0
			res, err := p.Run(context.Background(), arena, exec.StateMap{}, map[string]*tensor.Tensor{"x": x}, &exec.Options{Finish: func(outs map[string]*tensor.Tensor) error {
				calls++
				if got := dev.Alloc.Stats().AllocatedBytes.Current; got != last {
					t.Errorf("%d bytes allocated in Finish, the plan's last step holds %d", got, last)
				}
				if len(outs) != 2 || outs["grad"] == nil || outs["loss"] == nil {
					t.Fatalf("outputs %v", outs)
				}
				if dev.HasData() {
					if v := outs["grad"].F32()[3]; !near(v, x.F32()[3]) {
						t.Errorf("grad[3] = %v", v)
					}
				} else if outs["grad"].Data != nil {
					t.Error("data on the meta device")
				}
				if c.keep {
					kept = outs["grad"]
					delete(outs, "grad")
				}
				return c.err
			}})
			if !errors.Is(err, c.err) || calls != 1 {
				t.Fatalf("error %v, %d calls of Finish", err, calls)
			}
			if dev.Alloc.Stats().AllocatedBytes.Current != 0 {
				t.Errorf("%d bytes still counted after the run", dev.Alloc.Stats().AllocatedBytes.Current)
			}
			if c.err != nil {
				return
			}
			if _, ok := res["grad"]; ok == c.keep || res["loss"] == nil {
				t.Errorf("results %v (Finish kept grad: %v)", res, c.keep)
			}
			if !c.keep || !dev.HasData() {
				return
			}
			// What Finish kept is the arena's bytes: the next run writes them.
			x2 := tensor.New(tensor.Float32, tensor.Shape{n})
			for i := range x2.F32() {
				x2.F32()[i] = x.F32()[i] + 1
			}
			if _, err := p.Run(context.Background(), arena, exec.StateMap{}, map[string]*tensor.Tensor{"x": x2}, nil); err != nil {
				t.Fatal(err)
			}
			if v := kept.F32()[3]; !near(v, x2.F32()[3]) {
				t.Errorf("kept grad[3] = %v after a run on %v: not a view of the arena", v, x2.F32()[3])
			}
		})
	}
}

// near reports whether v is exp(x) to float32 rounding.
func near(v, x float32) bool {
	want := math.Exp(float64(x))
	return math.Abs(float64(v)-want) <= 1e-6*want
}
