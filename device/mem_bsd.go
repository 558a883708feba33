//go:build darwin || freebsd || netbsd || openbsd

package device

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// physicalMemory is the machine's RAM in bytes (0 if unknown).
func physicalMemory() int64 {
	name := "hw.physmem"
	if runtime.GOOS == "darwin" {
		name = "hw.memsize"
	}
	n, err := unix.SysctlUint64(name)
	if err != nil {
		return 0
	}
	return int64(n)
}
