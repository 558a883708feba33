package gemm

import (
	"syscall"
	"testing"
)

// TestCatchFault: a read of an unmapped page (what a wrong address in the
// AMX kernel would do) comes back from the probe's guard as an error, not
// the end of the process; a clean run as nil.
func TestCatchFault(t *testing.T) {
	if err := catchFault(func() {}); err != nil {
		t.Fatalf("clean run: %v", err)
	}
	page, err := syscall.Mmap(-1, 0, 4096, syscall.PROT_READ, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Munmap(page); err != nil {
		t.Fatal(err)
	}
	var sink byte
	err = catchFault(func() { sink = page[100] })
	if err == nil {
		t.Fatalf("read of an unmapped page: no fault caught (read %d)", sink)
	}
	t.Logf("caught: %v", err)
}
