package exec_test

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/headroom-ml/headroom/backend"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/exec"
	"github.com/headroom-ml/headroom/tensor"
)

// CompileWith takes its kernels from the backend it is given, not the
// device's: a trainer's own backend (the cpu one with threads of its own)
// over a device other trainers share.
func TestCompileWithOwnBackend(t *testing.T) {
	g := offloadGraph(t)
	dev := device.CPU()
	if _, err := exec.CompileWith(g, dev, noBackend{}); !errors.Is(err, backend.ErrUnsupported) {
		t.Fatalf("compiled with a backend that runs nothing: %v", err)
	}
	if _, err := exec.CompileWith(g, dev, nil); !errors.Is(err, exec.ErrNoBackend) {
		t.Fatalf("compiled with no backend: %v", err)
	}
	tb, ok := dev.Backend.(backend.Threaded)
	if !ok {
		t.Fatal("the cpu backend does not give backends with threads of their own")
	}
	own := tb.WithThreads(2)
	defer own.(io.Closer).Close()
	p, err := exec.CompileWith(g, dev, own)
	if err != nil {
		t.Fatal(err)
	}
	if p.Backend != own {
		t.Fatalf("program's backend %v, want the one given", p.Backend)
	}
	ref, err := exec.Compile(g, dev)
	if err != nil {
		t.Fatal(err)
	}
	x := tensor.New(tensor.Float32, tensor.Shape{4, 300})
	for i := range x.F32() {
		x.F32()[i] = float32(i%13) / 7
	}
	var outs [][]float32
	for _, p := range []*exec.Program{p, ref} {
		arena := exec.NewArena(dev)
		res, err := p.Run(context.Background(), arena, nil, map[string]*tensor.Tensor{"x": x}, nil)
		arena.Release()
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, res["y"].F32())
	}
	for i := range outs[0] {
		if outs[0][i] != outs[1][i] {
			t.Fatalf("y[%d] = %v with the own backend, %v with the device's", i, outs[0][i], outs[1][i])
		}
	}
}
