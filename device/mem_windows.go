package device

import (
	"unsafe"

	"golang.org/x/sys/windows"
)

var globalMemoryStatusEx = windows.NewLazySystemDLL("kernel32.dll").NewProc("GlobalMemoryStatusEx")

// memoryStatusEx is MEMORYSTATUSEX.
type memoryStatusEx struct {
	length, memoryLoad                    uint32
	totalPhys, availPhys                  uint64
	totalPageFile, availPageFile          uint64
	totalVirtual, availVirtual, availExtd uint64
}

// physicalMemory is the machine's RAM in bytes (0 if unknown).
func physicalMemory() int64 {
	s := memoryStatusEx{}
	s.length = uint32(unsafe.Sizeof(s))
	if r, _, _ := globalMemoryStatusEx.Call(uintptr(unsafe.Pointer(&s))); r == 0 {
		return 0
	}
	return int64(s.totalPhys)
}
