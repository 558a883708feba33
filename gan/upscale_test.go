package gan_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/gan"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/zoo"
)

// smallRRDBNet returns random weights of a small RRDBNet (nf 8, nb 1, gc 4).
func smallRRDBNet(t *testing.T) map[string]*tensor.Tensor {
	t.Helper()
	s := nn.NewStore()
	zoo.NewRRDBNet(s.Root(), zoo.RRDBNetConfig{InNC: 3, OutNC: 3, NF: 8, NB: 1, GC: 4})
	if err := s.Materialize(device.CPU(), 5); err != nil {
		t.Fatal(err)
	}
	sd := map[string]*tensor.Tensor{}
	for k, v := range s.StateDict() {
		sd[k] = v.Clone()
	}
	s.Release()
	return sd
}

func randomImage(h, w int) *tensor.Tensor {
	r := rand.New(rand.NewSource(int64(h*1000 + w)))
	v := make([]float32, 3*h*w)
	for i := range v {
		v[i] = r.Float32()
	}
	return tensor.FromFloat32(tensor.Shape{1, 3, h, w}, v)
}

func maxAbsDiff(a, b []float32) float64 {
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

// Tiles with the planned overlap give the untiled output; the planner's
// tile for a budget the untiled pass does not fit runs within it.
func TestUpscaleTiles(t *testing.T) {
	sd := smallRRDBNet(t)
	const h, w = 150, 123
	img := randomImage(h, w)
	ctx := context.Background()
	meta, err := gan.NewUpscaler(device.Meta(), sd)
	if err != nil {
		t.Fatal(err)
	}
	defer meta.Close()
	if c := meta.Config; c != (zoo.RRDBNetConfig{InNC: 3, OutNC: 3, NF: 8, NB: 1, GC: 4}) {
		t.Fatalf("config from the weights: %+v", c)
	}
	o := gan.Overlap(meta.Config)
	whole, err := meta.Memory(h, w)
	if err != nil {
		t.Fatal(err)
	}
	cpu, err := gan.NewUpscaler(device.CPU(), sd)
	if err != nil {
		t.Fatal(err)
	}
	defer cpu.Close()
	ref, err := cpu.Upscale(ctx, img, max(h, w), o)
	if err != nil {
		t.Fatal(err)
	}
	if want := (tensor.Shape{1, 3, 4 * h, 4 * w}); !ref.Shape.Equal(want) {
		t.Fatalf("shape %v, want %v", ref.Shape, want)
	}
	for _, core := range []int{40, 77} {
		got, err := cpu.Upscale(ctx, img, core, o)
		if err != nil {
			t.Fatal(err)
		}
		if d := maxAbsDiff(got.F32(), ref.F32()); d > 1e-5 {
			t.Errorf("tile %d, overlap %d: max difference %.3g from the untiled output", core, o, d)
		}
	}
	// Too little overlap is visible: the radius is needed.
	if got, err := cpu.Upscale(ctx, img, 16, 2); err != nil {
		t.Fatal(err)
	} else if d := maxAbsDiff(got.F32(), ref.F32()); d < 1e-4 {
		t.Errorf("overlap 2 differs by only %.3g: the test cannot see a wrong overlap", d)
	}
	for _, b := range []int64{whole - 1, whole - 6<<20} {
		t.Run(device.FormatBytes(b), func(t *testing.T) {
			core, err := meta.PlanTile(h, w, o, b)
			if errors.Is(err, gan.ErrTileBudget) {
				t.Skipf("no tile fits: %v", err)
			}
			if err != nil {
				t.Fatal(err)
			}
			if core >= max(h, w) {
				t.Fatalf("tile %d under %d < untiled %d", core, b, whole)
			}
			dev, err := device.New(fmt.Sprintf("cpu:mem=%d", b))
			if err != nil {
				t.Fatal(err)
			}
			u, err := gan.NewUpscaler(dev, sd)
			if err != nil {
				t.Fatal(err)
			}
			defer u.Close()
			got, err := u.Upscale(ctx, img, core, o)
			if err != nil {
				t.Fatalf("tile %d: %v", core, err)
			}
			st := dev.Alloc.Stats()
			t.Logf("budget %d (untiled %d): tile %d+2·%d, reserved peak %d", b, whole, core, o, st.ReservedBytes.Peak)
			if st.NumOOMs != 0 || st.ReservedBytes.Peak > b {
				t.Fatalf("tile %d: %d OOMs, reserved peak %d over %d", core, st.NumOOMs, st.ReservedBytes.Peak, b)
			}
			if d := maxAbsDiff(got.F32(), ref.F32()); d > 1e-5 {
				t.Errorf("max difference %.3g from the untiled output", d)
			}
			// The tile is the largest that fits: one more pixel does not.
			if m, _ := meta.Memory(min(h, core+1+2*o), min(w, core+1+2*o)); m <= b {
				t.Errorf("tile %d+1 plans %d, within %d", core, m, b)
			}
		})
	}
}

// PlanTile's tile is the largest that fits for every budget, though the
// planned memory does not grow monotonically with the window (the conv
// workspace depends on the shape); MemoryFloor, with which it skips
// windows, is below the planned memory of every window and grows with it.
func TestPlanTileLargest(t *testing.T) {
	sd := smallRRDBNet(t)
	meta, err := gan.NewUpscaler(device.Meta(), sd)
	if err != nil {
		t.Fatal(err)
	}
	defer meta.Close()
	const h, w = 72, 97
	o := gan.Overlap(meta.Config)
	win := func(n, core int) int { return min(n, core+2*o) }
	mem := make([]int64, w+1) // by core; mem[w] is the untiled pass
	var floor0 int64
	drops := 0
	for core := 1; core <= w; core++ {
		wh, ww := win(h, core), win(w, core)
		m, err := meta.Memory(wh, ww)
		if err != nil {
			t.Fatal(err)
		}
		mem[core] = m
		f := meta.MemoryFloor(wh, ww)
		if f > m || f < floor0 {
			t.Fatalf("core %d (%d×%d): floor %d, memory %d, previous floor %d", core, wh, ww, f, m, floor0)
		}
		floor0 = f
		if core > 1 && m < mem[core-1] {
			drops++
		}
	}
	if drops == 0 {
		t.Fatal("planned memory grows monotonically here: the test cannot see a bisection's error")
	}
	budgets := map[int64]bool{}
	for _, m := range mem[1:] {
		budgets[m], budgets[m-1] = true, true
	}
	for b := range budgets {
		want := 0
		for core := w; core >= 1; core-- {
			if mem[core] <= b {
				want = core
				break
			}
		}
		got, err := meta.PlanTile(h, w, o, b)
		if want == 0 {
			if !errors.Is(err, gan.ErrTileBudget) {
				t.Errorf("budget %d: tile %d, %v; want ErrTileBudget", b, got, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("budget %d: %v", b, err)
		}
		// Cores whose windows are the untiled ones plan alike: any of
		// them is the untiled pass.
		if got != want && !(win(h, got) == win(h, want) && win(w, got) == win(w, want)) {
			t.Errorf("budget %d: tile %d (plans %d), want %d (plans %d)", b, got, mem[got], want, mem[want])
		}
	}
}
