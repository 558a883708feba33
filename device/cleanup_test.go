package device

import (
	"runtime"
	"testing"
	"time"
)

// An allocator dropped with blocks still allocated and segments mapped
// (Close forgotten) has its segments unmapped by the garbage collector.
func TestCleanupUnmapsForgottenSegments(t *testing.T) {
	before := cleanedBytes.Load()
	var size int64
	func() {
		a := NewAllocator(hostSource(), 0)
		if _, err := a.Allocate(3<<20, Tag{Category: Activation}); err != nil {
			t.Fatal(err)
		}
		size = a.Stats().ReservedBytes.Current
	}()
	if size == 0 {
		t.Fatal("nothing reserved")
	}
	// Cleanups run on their own goroutine after a collection: wait for it
	// (the deadline is a guard against hanging, not a measurement).
	deadline := time.Now().Add(30 * time.Second)
	for cleanedBytes.Load()-before < size {
		if time.Now().After(deadline) {
			t.Fatalf("unmapped %d bytes, want at least %d", cleanedBytes.Load()-before, size)
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
}

// Segments unmapped by the allocator itself are not unmapped again.
func TestCleanupSkipsReleasedSegments(t *testing.T) {
	a := NewAllocator(hostSource(), 0)
	b, err := a.Allocate(3<<20, Tag{Category: Activation})
	if err != nil {
		t.Fatal(err)
	}
	if len(a.mapped.segs) != 1 {
		t.Fatalf("%d segments tracked, want 1", len(a.mapped.segs))
	}
	a.Free(b)
	a.EmptyCache()
	if len(a.mapped.segs) != 0 {
		t.Fatalf("%d segments tracked after EmptyCache, want 0", len(a.mapped.segs))
	}
}
