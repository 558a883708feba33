package device

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/windows"
)

// virtualSource maps memory with VirtualAlloc: outside the Go heap,
// returned to the OS by VirtualFree, page-aligned.
type virtualSource struct{}

// hostSource is the source of the cpu device's memory.
func hostSource() source { return virtualSource{} }

func (virtualSource) Name() string { return "cpu" }

func (virtualSource) Map(size int64) ([]byte, error) {
	if int64(uintptr(size)) != size {
		return nil, fmt.Errorf("VirtualAlloc %d bytes: larger than this platform's address space", size)
	}
	addr, err := windows.VirtualAlloc(0, uintptr(size), windows.MEM_RESERVE|windows.MEM_COMMIT, windows.PAGE_READWRITE)
	if err != nil {
		return nil, fmt.Errorf("VirtualAlloc %d bytes: %w", size, err)
	}
	// Read the address as a pointer through memory, not by converting the
	// uintptr: the mapping is not Go memory and never moves.
	p := *(*unsafe.Pointer)(unsafe.Pointer(&addr))
	return unsafe.Slice((*byte)(p), int(size)), nil
}

func (virtualSource) Unmap(b []byte) error {
	return windows.VirtualFree(uintptr(unsafe.Pointer(unsafe.SliceData(b))), 0, windows.MEM_RELEASE)
}

// Discard decommits the pages and commits them again: they stay reserved
// at the same address and read as zeros.
func (virtualSource) Discard(b []byte) error {
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if err := windows.VirtualFree(addr, uintptr(len(b)), windows.MEM_DECOMMIT); err != nil {
		return err
	}
	_, err := windows.VirtualAlloc(addr, uintptr(len(b)), windows.MEM_COMMIT, windows.PAGE_READWRITE)
	return err
}
