//go:build linux || darwin || freebsd || netbsd || openbsd

package device

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// mmapSource maps anonymous private memory: outside the Go heap, returned to
// the OS by munmap, page-aligned (so any element type may view it).
type mmapSource struct{}

// hostSource is the source of the cpu device's memory.
func hostSource() source { return mmapSource{} }

func (mmapSource) Name() string { return "cpu" }

func (mmapSource) Map(size int64) ([]byte, error) {
	if int64(int(size)) != size {
		return nil, fmt.Errorf("mmap %d bytes: larger than this platform's address space", size)
	}
	b, err := unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("mmap %d bytes: %w", size, err)
	}
	return b, nil
}

func (mmapSource) Unmap(b []byte) error { return unix.Munmap(b) }

func (mmapSource) Discard(b []byte) error { return unix.Madvise(b, unix.MADV_DONTNEED) }
