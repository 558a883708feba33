package memviz_test

import (
	"testing"

	"github.com/headroom-ml/headroom/device"
)

const (
	kib = int64(1) << 10
	mib = int64(1) << 20
)

// known is what the deterministic allocation sequence of knownSnapshot
// gives, worked out by hand (every size a multiple of 512, so blocks are
// exactly as large as their requests).
var known = struct {
	events                   int   // history entries, the timeline's points
	peak                     int64 // active bytes at the peak
	peakEvent                int   // the entry after which the peak is reached
	param, act, grad         int64 // by category at the peak
	largest                  int64
	largestModule, largestOp string
	reservedAtPeak           int64
}{
	events:    13, // 2 segment_alloc, 7 alloc, 3 free, snapshot
	peak:      600*kib + 100*kib + 3*mib + 5*mib/2 + 100*kib,
	peakEvent: 6, // segment_alloc, P1, P2, segment_alloc, A1, A2, G2: after G2's alloc
	param:     700 * kib,
	act:       3*mib + 5*mib/2,
	grad:      100 * kib,
	largest:   3 * mib, largestModule: "encoder.fc1", largestOp: "linear",
	reservedAtPeak: 2*mib + 20*mib,
}

// knownSnapshot records a small training-like sequence on the meta device:
// two parameters, activations of two layers, their gradients, activations
// freed as the backward pass goes. Entry times are set to 1, 2, 3, ... µs
// after a fixed epoch so that the snapshot is the same every run.
func knownSnapshot(t testing.TB) (*device.Snapshot, *device.Allocator) {
	t.Helper()
	a := device.Meta().Alloc
	a.RecordHistory(1000)
	alloc := func(n int64, c device.Category, module, op string) *device.Block {
		b, err := a.Allocate(n, device.Tag{Category: c, Module: module, Op: op})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	alloc(600*kib, device.Parameter, "encoder.fc1", "encoder.fc1.weight") // seg(small) + alloc
	alloc(100*kib, device.Parameter, "encoder.fc2", "encoder.fc2.weight")
	a1 := alloc(3*mib, device.Activation, "encoder.fc1", "linear") // seg(large) + alloc
	a2 := alloc(5*mib/2, device.Activation, "encoder.relu", "relu")
	alloc(100*kib, device.Gradient, "encoder.fc2", "encoder.fc2.weight") // the peak
	a.Free(a2)
	alloc(600*kib, device.Gradient, "encoder.fc1", "encoder.fc1.weight")
	a.Free(a1)
	a3 := alloc(3*mib/2, device.Activation, "decoder", "conv2d")
	a.Free(a3)
	s := a.Snapshot()
	fixTimes(s)
	return s, a
}

func fixTimes(s *device.Snapshot) {
	for _, tr := range s.DeviceTraces {
		for i := range tr {
			tr[i].TimeUS = 1764443426000000 + int64(i)
		}
	}
}

// richSnapshot adds what the known sequence lacks: a step arena with
// tensors placed in it, a Track without an address, a failed allocation,
// empty_cache, and a free whose alloc fell out of the ring buffer.
func richSnapshot(t testing.TB) (*device.Snapshot, *device.Allocator) {
	t.Helper()
	dev, err := device.New("meta:mem=64MiB")
	if err != nil {
		t.Fatal(err)
	}
	a := dev.Alloc
	w, _ := a.Allocate(mib, device.Tag{Category: device.Parameter, Module: "fc", Op: "fc.weight"})
	early, _ := a.Allocate(4096, device.Tag{Category: device.Input, Op: "x"})
	a.RecordHistory(1000)
	a.Free(early) // its alloc was never recorded
	arena, err := a.Reserve(8*mib, device.Tag{Category: device.Activation, Op: "arena"})
	if err != nil {
		t.Fatal(err)
	}
	a.TrackIn(arena, 0, 2*mib, 2*mib, device.Tag{Category: device.Activation, Module: "fc", Op: "linear"})
	a.TrackIn(arena, 4*mib, mib, mib-100, device.Tag{Category: device.Temporary, Module: "fc", Op: "softmax"})
	a.Track(512, 500, device.Workspace)
	if _, err := a.Allocate(100*mib, device.Tag{Category: device.Activation, Module: "big", Op: "matmul"}); err == nil {
		t.Fatal("a 100 MiB allocation fit in 64 MiB")
	}
	a.UntrackIn(arena, 0)
	a.Untrack(512, 500, device.Workspace)
	a.Release(arena) // the softmax tensor is freed with it
	a.EmptyCache()
	a.Free(w)
	s := a.Snapshot()
	fixTimes(s)
	return s, a
}
