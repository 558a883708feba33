package device

import "fmt"

// source provides segments of memory. Map returns nil data on a device
// without memory (meta).
type source interface {
	Name() string
	Map(size int64) ([]byte, error)
	Unmap(b []byte) error
}

// discarder is a source that can hand the pages under a range back to the
// OS while keeping the range mapped (they read as zeros afterwards).
type discarder interface {
	Discard(b []byte) error
}

// metaSource hands out no memory at all.
type metaSource struct{}

func (metaSource) Name() string                   { return "meta" }
func (metaSource) Map(size int64) ([]byte, error) { return nil, nil }
func (metaSource) Unmap(b []byte) error           { return nil }

// heapSource takes segments from the Go heap: the fallback on systems
// where headroom maps no memory of its own (see hostSource). Unmapping
// drops the reference; the garbage collector returns the memory later.
type heapSource struct{}

func (heapSource) Name() string { return "cpu" }

func (heapSource) Map(size int64) ([]byte, error) {
	if int64(int(size)) != size {
		return nil, fmt.Errorf("%d bytes do not fit in this platform's address space", size)
	}
	return make([]byte, size), nil
}

func (heapSource) Unmap(b []byte) error { return nil }
