//go:build unix

package dataset

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// mapFile maps a file read-only and shared, so that every worker (and every
// process) reading it shares the page cache's one copy, and a file larger
// than memory is paged in and out by the kernel rather than held.
func mapFile(path string) (data []byte, unmap func() error, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("dataset: %w", err)
	}
	defer f.Close() // the mapping outlives the descriptor
	st, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("dataset: %w", err)
	}
	size := st.Size()
	if size == 0 {
		return nil, func() error { return nil }, nil
	}
	if size != int64(int(size)) {
		return nil, nil, fmt.Errorf("dataset: %s: %d bytes do not fit the address space", path, size)
	}
	data, err = unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("dataset: mmap %s: %w", path, err)
	}
	return data, func() error { return unix.Munmap(data) }, nil
}

// mapped says whether mapFile maps (true) or reads (false).
const mapped = true
