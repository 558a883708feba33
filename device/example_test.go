package device_test

import (
	"errors"
	"fmt"

	"github.com/headroom-ml/headroom/device"
)

func Example() {
	dev, _ := device.New("meta:mem=64MiB")
	a := dev.Alloc
	w, _ := a.Allocate(1000, device.Tag{Category: device.Parameter, Module: "fc", Op: "fc.weight"})
	m, _ := a.Allocate(3<<20, device.Tag{Category: device.OptimizerState, Module: "fc", Op: "exp_avg"})
	fmt.Println("allocated:", a.MemoryAllocated(), "reserved:", device.FormatBytes(a.MemoryReserved()))
	a.Free(m)
	fmt.Println("after free, reserved:", device.FormatBytes(a.MemoryReserved()))
	a.EmptyCache()
	fmt.Println("after EmptyCache, reserved:", device.FormatBytes(a.MemoryReserved()))
	a.Free(w)
	stats := a.MemoryStats()
	fmt.Println("peak:", stats["allocated_bytes.all.peak"], "segments mapped:", stats["segment.all.allocated"])
	// Output:
	// allocated: 3146752 reserved: 22.00 MiB
	// after free, reserved: 22.00 MiB
	// after EmptyCache, reserved: 2.00 MiB
	// peak: 3146752 segments mapped: 2
}

func ExampleOutOfMemoryError() {
	dev, _ := device.New("meta:mem=24MiB")
	_, err := dev.Alloc.Allocate(30<<20, device.Tag{Category: device.Activation, Module: "layer1", Op: "conv2d"})
	var oom *device.OutOfMemoryError
	if errors.As(err, &oom) {
		fmt.Println(device.FormatBytes(oom.Requested), device.FormatBytes(oom.SuggestedCapacity()))
	}
	// Output: 30.00 MiB 30.00 MiB
}

func ExampleAllocator_Snapshot() {
	a := device.Meta().Alloc
	a.RecordHistory(1000)
	b, _ := a.Allocate(4096, device.Tag{Category: device.Input, Op: "x"})
	a.Free(b)
	s := a.Snapshot()
	for _, e := range s.DeviceTraces[0] {
		fmt.Printf("%s %d %q\n", e.Action, e.Size, e.Category)
	}
	seg := s.Segments[0]
	fmt.Println(seg.SegmentType, seg.TotalSize, len(seg.Blocks), seg.Blocks[0].State)
	// Output:
	// segment_alloc 2097152 ""
	// alloc 4096 "input"
	// free 4096 "input"
	// snapshot 0 ""
	// small 2097152 1 inactive
}
