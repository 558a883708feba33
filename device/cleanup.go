package device

import (
	"runtime"
	"sync/atomic"
	"unsafe"
)

// mappedSet holds the segments an allocator has mapped, apart from the
// Allocator itself, so that a cleanup attached to the allocator can unmap
// them once it is unreachable: memory mapped outside the Go heap is not
// returned by the garbage collector, and an allocator dropped without its
// blocks released (a forgotten Trainer.Close or Store.Release) would
// otherwise keep it mapped until the process exits.
//
// Every Block points to its allocator, so the cleanup cannot run while a
// block is reachable. Raw views of device memory (a tensor's Data, an
// optimizer's state slices) do not: they must not be used once nothing
// refers to their device's allocator or blocks any more.
//
// Guarded by the allocator's mu while the allocator lives; the cleanup
// runs only after it is unreachable, so nothing else touches the set then.
type mappedSet struct {
	src  source
	segs map[*byte][]byte
}

// cleanedBytes counts the bytes cleanups have unmapped (for tests).
var cleanedBytes atomic.Int64

func (m *mappedSet) add(b []byte) {
	if b != nil {
		m.segs[unsafe.SliceData(b)] = b
	}
}

func (m *mappedSet) remove(b []byte) {
	if b != nil {
		delete(m.segs, unsafe.SliceData(b))
	}
}

// unmapAll releases every segment still mapped.
func unmapAll(m *mappedSet) {
	for k, b := range m.segs {
		if m.src.Unmap(b) == nil {
			cleanedBytes.Add(int64(len(b)))
		}
		delete(m.segs, k)
	}
}

// watch attaches the safety net to a.
func (a *Allocator) watch() {
	a.mapped = &mappedSet{src: a.src, segs: map[*byte][]byte{}}
	runtime.AddCleanup(a, unmapAll, a.mapped)
}
