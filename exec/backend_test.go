package exec_test

import (
	"context"
	"errors"
	"testing"

	"github.com/headroom-ml/headroom/backend"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/exec"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// offloadGraph is y = tanh(reload(offload(x)) * 2): the offloaded bytes
// must come back unchanged.
func offloadGraph(t *testing.T) *trace.Graph {
	t.Helper()
	g := trace.New()
	err := trace.Capture(func() {
		x := g.Input("x", tensor.Float32, tensor.Shape{4, 300})
		off := &prim.Offload{}
		tok := prim.Apply1(off, op.Scale(x, 2))
		back := prim.Apply1(&prim.Reload{From: off, Meta: trace.Meta{DType: tensor.Float32, Shape: tensor.Shape{4, 300}}}, tok)
		g.Output("y", op.Tanh(back))
	})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// The host store of an offload is bound when the program runs (Options.Host),
// not when it is compiled: one program runs with two stores.
func TestOffloadHostBoundAtRunTime(t *testing.T) {
	g := offloadGraph(t)
	dev := device.CPU()
	p, err := exec.Compile(g, dev)
	if err != nil {
		t.Fatal(err)
	}
	x := tensor.New(tensor.Float32, tensor.Shape{4, 300})
	for i := range x.F32() {
		x.F32()[i] = float32(i%17) / 10
	}
	var want []float32
	for _, host := range []*device.HostPool{device.NewHostPool(device.CPU()), device.NewHostPool(device.CPU())} {
		arena := exec.NewArena(dev)
		res, err := p.Run(context.Background(), arena, nil, map[string]*tensor.Tensor{"x": x}, &exec.Options{Host: host})
		arena.Release()
		if err != nil {
			t.Fatal(err)
		}
		if host.Device.Alloc.MaxMemoryAllocated() == 0 {
			t.Error("nothing was offloaded to the bound host pool")
		}
		if host.Held() != 0 {
			t.Errorf("the host pool still holds %d tensors", host.Held())
		}
		got := res["y"].F32()
		if want == nil {
			want = got
			continue
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("y[%d] = %v with the second store, %v with the first", i, got[i], want[i])
			}
		}
	}
	// No store bound: the process-wide one.
	before := device.DefaultHost().Device.Alloc.Stats().Allocation.Allocated
	arena := exec.NewArena(dev)
	defer arena.Release()
	if _, err := p.Run(context.Background(), arena, nil, map[string]*tensor.Tensor{"x": x}, nil); err != nil {
		t.Fatal(err)
	}
	if device.DefaultHost().Device.Alloc.Stats().Allocation.Allocated == before {
		t.Error("without Options.Host, nothing went to device.DefaultHost()")
	}
}

// noBackend runs nothing: every op is unsupported.
type noBackend struct{}

func (noBackend) Name() string { return "none" }
func (noBackend) Kernel(o trace.Op) (backend.Kernel, error) {
	return nil, backend.Unsupported("none", o, "")
}
func (noBackend) Workspace(*trace.Node) int64 { return 0 }

// Compile asks the device's backend for every kernel: a backend without one
// is a typed error naming the op, and a device without a backend is refused.
func TestCompileAsksTheDevicesBackend(t *testing.T) {
	g := offloadGraph(t)
	dev := device.CPU()
	dev.Backend = noBackend{}
	_, err := exec.Compile(g, dev)
	var ue *backend.UnsupportedError
	var ne *exec.NodeError
	if !errors.As(err, &ue) || !errors.Is(err, backend.ErrUnsupported) || !errors.As(err, &ne) || ue.Op != "mul_scalar" {
		t.Fatalf("got %v, want an *UnsupportedError for mul_scalar inside a *NodeError", err)
	}
	dev.Backend = nil
	if _, err := exec.Compile(g, dev); !errors.Is(err, exec.ErrNoBackend) {
		t.Fatalf("device without a backend: %v", err)
	}
}
