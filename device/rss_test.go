package device

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

func uintptrOf(b []byte) int64 { return int64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

// rss is the process's resident memory in bytes (/proc/self/statm).
func rss(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Skipf("no /proc/self/statm: %v", err)
	}
	f := strings.Fields(string(b))
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return pages * int64(os.Getpagesize())
}

// On the cpu device segments are mapped outside the Go heap: touching a
// block raises the resident memory, freeing it keeps it cached, and
// EmptyCache gives it back to the OS.
func TestEmptyCacheLowersRSS(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	const size = 64 << 20
	const tol = 8 << 20
	a := CPU().Alloc
	runtime.GC()
	base := rss(t)
	b := mustAlloc(t, a, size, Tag{Category: Activation})
	for i := 0; i < len(b.Data); i += 4096 {
		b.Data[i] = 1
	}
	touched := rss(t)
	if touched-base < size-tol {
		t.Fatalf("RSS rose by %s after touching %s", FormatBytes(touched-base), FormatBytes(size))
	}
	a.Free(b)
	if cached := rss(t); cached-base < size-tol {
		t.Fatalf("RSS fell by %s on Free; the block should stay cached", FormatBytes(touched-cached))
	}
	if a.MemoryReserved() != size {
		t.Fatalf("reserved %d", a.MemoryReserved())
	}
	a.EmptyCache()
	after := rss(t)
	if after-base > tol {
		t.Fatalf("RSS %s above the start after EmptyCache (start %s, touched %s)", FormatBytes(after-base), FormatBytes(base), FormatBytes(touched))
	}
	t.Logf("RSS: start %s, touched %s, after EmptyCache %s", FormatBytes(base), FormatBytes(touched), FormatBytes(after))

	// Free pages inside a segment that stays (it still holds a live block)
	// go back too.
	keep := mustAlloc(t, a, 4<<20, Tag{})
	tmp := mustAlloc(t, a, 14<<20, Tag{}) // the same 20 MiB segment
	for i := 0; i < len(tmp.Data); i += 4096 {
		tmp.Data[i] = 1
	}
	before := rss(t)
	a.Free(tmp)
	a.EmptyCache()
	if a.MemoryReserved() != 20<<20 {
		t.Fatalf("reserved %d", a.MemoryReserved())
	}
	if fell := before - rss(t); fell < 14<<20-tol {
		t.Fatalf("RSS fell by %s after freeing 14 MiB inside a kept segment", FormatBytes(fell))
	}
	// The discarded pages read as zeros and a new block is zeroed anyway.
	again := mustAlloc(t, a, 14<<20, Tag{})
	for i := 0; i < len(again.Data); i += 4096 {
		if again.Data[i] != 0 {
			t.Fatal("reused block not zeroed")
		}
	}
	a.Free(again)
	a.Free(keep)
	a.EmptyCache()
}
