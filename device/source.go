package device

import (
	"fmt"
	"syscall"
)

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

// mmapSource maps anonymous private memory: outside the Go heap, returned to
// the OS by munmap, page-aligned (so any element type may view it).
type mmapSource struct{}

func (mmapSource) Name() string { return "cpu" }

func (mmapSource) Map(size int64) ([]byte, error) {
	b, err := syscall.Mmap(-1, 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("mmap %d bytes: %w", size, err)
	}
	return b, nil
}

func (mmapSource) Unmap(b []byte) error { return syscall.Munmap(b) }

func (mmapSource) Discard(b []byte) error { return syscall.Madvise(b, syscall.MADV_DONTNEED) }

// metaSource hands out no memory at all.
type metaSource struct{}

func (metaSource) Name() string                   { return "meta" }
func (metaSource) Map(size int64) ([]byte, error) { return nil, nil }
func (metaSource) Unmap(b []byte) error           { return nil }

// hostSource is the source of the cpu device's memory.
func hostSource() source { return mmapSource{} }
