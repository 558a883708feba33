package device

import (
	"fmt"
	"syscall"
)

// source provides segments of memory.
type source interface {
	Map(size int64) ([]byte, error)
	Unmap(b []byte) error
}

// mmapSource maps anonymous private memory: outside the Go heap, returned to
// the OS by munmap, page-aligned (so any element type may view it).
type mmapSource struct{}

func (mmapSource) Map(size int64) ([]byte, error) {
	b, err := syscall.Mmap(-1, 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("mmap %d bytes: %w", size, err)
	}
	return b, nil
}

func (mmapSource) Unmap(b []byte) error { return syscall.Munmap(b) }

// metaSource hands out no memory at all.
type metaSource struct{}

func (metaSource) Map(size int64) ([]byte, error) { return nil, nil }
func (metaSource) Unmap(b []byte) error           { return nil }
