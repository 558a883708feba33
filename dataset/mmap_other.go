//go:build !unix

package dataset

import (
	"fmt"
	"os"
)

// mapFile reads the whole file: the fallback where x/sys/unix's mmap is not
// available. The data is then private heap memory, not page cache.
func mapFile(path string) (data []byte, unmap func() error, err error) {
	data, err = os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("dataset: %w", err)
	}
	return data, func() error { return nil }, nil
}

// mapped says whether mapFile maps (true) or reads (false).
const mapped = false
