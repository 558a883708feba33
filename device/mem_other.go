//go:build !(linux || darwin || freebsd || netbsd || openbsd || windows)

package device

// physicalMemory is 0 (unknown) where headroom cannot ask the system: a
// memory fraction without a capacity then limits nothing.
func physicalMemory() int64 { return 0 }
