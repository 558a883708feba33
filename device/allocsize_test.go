package device

import (
	"errors"
	"math"
	"testing"
)

// Sizes near MaxInt64 overflowed the 512-byte rounding: on cpu a panic with
// the allocator's lock held (every later call then blocked), on meta a
// 2 MiB block for a 9.2e18-byte request. They are refused with a
// *SizeError, and the allocator stays usable.
func TestHugeSizesRefused(t *testing.T) {
	sizes := []int64{
		math.MaxInt64,
		math.MaxInt64 - 1,
		math.MaxInt64 - 511,
		math.MaxInt64 - 512,
		math.MaxInt64 - RoundLarge,
		MaxAllocSize + 1,
		-1,
		math.MinInt64,
	}
	for _, spec := range []string{"cpu", "meta", "meta:mem=1GiB", "cpu:mem=1GiB"} {
		for _, reserve := range []bool{false, true} {
			for _, n := range sizes {
				d, err := New(spec)
				if err != nil {
					t.Fatal(err)
				}
				a := d.Alloc
				var b *Block
				func() {
					defer func() {
						if r := recover(); r != nil {
							t.Errorf("%s reserve=%v size %d: panic %v", spec, reserve, n, r)
						}
					}()
					if reserve {
						b, err = a.Reserve(n, Tag{})
					} else {
						b, err = a.Allocate(n, Tag{})
					}
				}()
				if !a.mu.TryLock() {
					t.Fatalf("%s reserve=%v size %d: the allocator's lock is still held", spec, reserve, n)
				}
				a.mu.Unlock()
				var se *SizeError
				if b != nil || !errors.As(err, &se) || !errors.Is(err, ErrInvalidSize) || se.Requested != n {
					t.Errorf("%s reserve=%v size %d: got block %v, error %v; want a *SizeError", spec, reserve, n, b, err)
				}
				if s := a.Stats(); s.ReservedBytes.Current != 0 || s.NumDeviceAlloc != 0 {
					t.Errorf("%s size %d: a refused request mapped memory (%d bytes)", spec, n, s.ReservedBytes.Current)
				}
				// Still usable.
				small := mustAlloc(t, a, 100, Tag{})
				a.Free(small)
				mustCheck(t, a)
			}
		}
	}
}

// The largest size allowed does not overflow any of the allocator's
// arithmetic: it is an out-of-memory under a capacity (never a block
// smaller than asked), and on meta without one it is handed out whole.
func TestMaxAllocSize(t *testing.T) {
	if RoundSize(MaxAllocSize) < MaxAllocSize || SegmentSize(RoundSize(MaxAllocSize)) < MaxAllocSize {
		t.Fatalf("rounding of MaxAllocSize overflows: %d, %d", RoundSize(MaxAllocSize), SegmentSize(RoundSize(MaxAllocSize)))
	}
	a := mustNew(t, "meta:mem=1GiB").Alloc
	if _, err := a.Allocate(MaxAllocSize, Tag{}); !errors.Is(err, ErrOutOfMemory) {
		t.Errorf("meta:mem=1GiB: %d bytes: %v, want out of memory", MaxAllocSize, err)
	}
	mustCheck(t, a)

	a = Meta().Alloc
	b, err := a.Allocate(MaxAllocSize, Tag{})
	if err != nil || b.Size < MaxAllocSize {
		t.Fatalf("meta: %d bytes: %v, %v", MaxAllocSize, b, err)
	}
	// The address space of the meta device is finite too: a second request
	// that would run past it is refused, not wrapped.
	var refused error
	for range 4 {
		if _, refused = a.Allocate(MaxAllocSize, Tag{}); refused != nil {
			break
		}
	}
	if !errors.Is(refused, ErrOutOfMemory) {
		t.Errorf("meta: repeated %d-byte requests: %v, want out of memory once the address space is used up", MaxAllocSize, refused)
	}
	if s := a.Stats(); s.ReservedBytes.Current < 0 || s.AllocatedBytes.Current < 0 {
		t.Errorf("statistics wrapped: %+v", s.ReservedBytes)
	}
	mustCheck(t, a)
}

// TrackIn's bounds check must not wrap for a huge offset plus size.
func TestTrackInOverflow(t *testing.T) {
	a := Meta().Alloc
	r, err := a.Reserve(4096, Tag{})
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("TrackIn with offset+size past MaxInt64 was accepted")
			}
		}()
		a.TrackIn(r, 1024, math.MaxInt64-10, 10, Tag{})
	}()
	if !a.mu.TryLock() {
		t.Fatal("lock held after TrackIn's panic")
	}
	a.mu.Unlock()
	mustCheck(t, a)
}

func mustNew(t *testing.T, spec string) *Device {
	t.Helper()
	d, err := New(spec)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// The out-of-memory that ends the meta device's address space suggests a
// capacity without wrapping to a negative number.
func TestAddressSpaceOOMSuggestion(t *testing.T) {
	a := Meta().Alloc
	var err error
	for range 4 {
		if _, err = a.Allocate(MaxAllocSize, Tag{}); err != nil {
			break
		}
	}
	var oom *OutOfMemoryError
	if !errors.As(err, &oom) {
		t.Fatalf("got %v, want *OutOfMemoryError", err)
	}
	if oom.Suggested <= 0 || oom.SuggestedCapacity() <= 0 || oom.Cause == nil {
		t.Errorf("suggested %d, capacity %d, cause %v", oom.Suggested, oom.SuggestedCapacity(), oom.Cause)
	}
	_ = oom.Error()
}
