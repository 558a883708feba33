package device

import (
	"errors"
	"math/rand"
	"reflect"
	"sort"
	"strings"
	"testing"
)

const (
	kib = int64(1) << 10
	mib = int64(1) << 20
)

func mustAlloc(t *testing.T, a *Allocator, n int64, tag Tag) *Block {
	t.Helper()
	b, err := a.Allocate(n, tag)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustCheck(t *testing.T, a *Allocator) {
	t.Helper()
	if err := a.check(); err != nil {
		t.Fatal(err)
	}
}

func TestRoundSizeAndSegmentSize(t *testing.T) {
	for _, c := range []struct {
		req, rounded, segment int64
		small                 bool
	}{
		{0, 512, 2 * mib, true},
		{1, 512, 2 * mib, true},
		{512, 512, 2 * mib, true},
		{513, 1024, 2 * mib, true},
		{1000, 1024, 2 * mib, true},
		{mib - 1, mib, 2 * mib, true},
		{mib, mib, 2 * mib, true},
		{mib + 1, mib + 512, 20 * mib, false},
		{3 * mib, 3 * mib, 20 * mib, false},
		{10*mib - 512, 10*mib - 512, 20 * mib, false},
		{10 * mib, 10 * mib, 10 * mib, false},
		{10*mib + 1, 10*mib + 512, 12 * mib, false},
		{25 * mib, 25 * mib, 26 * mib, false},
		{100*mib + 3, 100*mib + 512, 102 * mib, false},
	} {
		if got := RoundSize(c.req); got != c.rounded {
			t.Errorf("RoundSize(%d) = %d, want %d", c.req, got, c.rounded)
		}
		if got := SegmentSize(RoundSize(c.req)); got != c.segment {
			t.Errorf("SegmentSize(RoundSize(%d)) = %d, want %d", c.req, got, c.segment)
		}
		if got := IsSmall(c.req); got != c.small {
			t.Errorf("IsSmall(%d) = %v", c.req, got)
		}
		// The allocator agrees: one allocation on a fresh device maps one
		// segment of that size in that pool.
		a := Meta().Alloc
		b := mustAlloc(t, a, c.req, Tag{})
		s := a.Stats()
		pool, other := s.ReservedBytes.Large, s.ReservedBytes.Small
		if c.small {
			pool, other = other, pool
		}
		if pool.Current != c.segment || other.Current != 0 || s.Segment.Current != 1 {
			t.Errorf("Allocate(%d): reserved small %d large %d in %d segments; want %d in the %v pool", c.req, s.ReservedBytes.Small.Current, s.ReservedBytes.Large.Current, s.Segment.Current, c.segment, map[bool]string{true: "small", false: "large"}[c.small])
		}
		if b.Size < c.rounded || b.Requested != c.req {
			t.Errorf("Allocate(%d): block %d/%d", c.req, b.Size, b.Requested)
		}
		mustCheck(t, a)
	}
}

// Splitting follows PyTorch: a small block splits when at least 512 bytes
// remain, a large one when more than 1 MiB remains; otherwise the whole
// block is handed out and counted.
func TestSplitRules(t *testing.T) {
	for _, c := range []struct {
		name      string
		first     int64 // carved from a fresh segment first (0: none)
		req       int64 // then this request
		wantSize  int64 // block size it gets
		wantSplit int64 // inactive split blocks afterwards
	}{
		{"small, rest 1 MiB", 0, mib, mib, 1},
		{"small, rest exactly 512", mib, mib - 512, mib - 512, 1},
		{"small, rest 0", mib, mib, mib, 0},
		{"large, rest exactly 1 MiB is not split", 0, 19 * mib, 20 * mib, 0},
		{"large, rest 1 MiB + 512 is split", 0, 19*mib - 512, 19*mib - 512, 1},
		{"large, rest 512 KiB", 0, 20*mib - 512*kib, 20 * mib, 0},
		{"large over 10 MiB, rest 1.5 MiB", 0, 10*mib + 512*kib, 10*mib + 512*kib, 1},
		{"large over 10 MiB, rest 0.5 MiB", 0, 11*mib + 512*kib, 12 * mib, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := Meta().Alloc
			if c.first > 0 {
				mustAlloc(t, a, c.first, Tag{})
			}
			b := mustAlloc(t, a, c.req, Tag{})
			mustCheck(t, a)
			s := a.Stats()
			if b.Size != c.wantSize || s.InactiveSplit.Current != c.wantSplit || s.Segment.Current != 1 {
				t.Fatalf("block %d, inactive split %d, segments %d; want block %d, inactive split %d, 1 segment", b.Size, s.InactiveSplit.Current, s.Segment.Current, c.wantSize, c.wantSplit)
			}
			if s.AllocatedBytes.Current != c.first+c.wantSize {
				t.Fatalf("allocated %d", s.AllocatedBytes.Current)
			}
		})
	}
}

func TestBestFitAndCoalescing(t *testing.T) {
	a := Meta().Alloc
	// Five 4 MiB blocks fill one 20 MiB segment.
	var bs []*Block
	for range 5 {
		bs = append(bs, mustAlloc(t, a, 4*mib, Tag{}))
	}
	s := a.Stats()
	if s.Segment.Current != 1 || s.InactiveSplit.Current != 0 {
		t.Fatalf("segments %d inactive %d", s.Segment.Current, s.InactiveSplit.Current)
	}
	a.Free(bs[1])
	a.Free(bs[3])
	mustCheck(t, a)
	if s := a.Stats(); s.InactiveSplit.Current != 2 || s.InactiveSplitBytes.Current != 8*mib {
		t.Fatalf("after two frees: %d inactive blocks, %d bytes", s.InactiveSplit.Current, s.InactiveSplitBytes.Current)
	}
	// Freeing the block between them merges all three.
	a.Free(bs[2])
	mustCheck(t, a)
	if s := a.Stats(); s.InactiveSplit.Current != 1 || s.InactiveSplitBytes.Current != 12*mib {
		t.Fatalf("after merge: %d inactive blocks, %d bytes", s.InactiveSplit.Current, s.InactiveSplitBytes.Current)
	}
	// Best fit: a 3 MiB request takes the merged 12 MiB block (the only
	// one) at its start and splits it.
	b := mustAlloc(t, a, 3*mib, Tag{})
	if b.Address() != bs[1].Address() {
		t.Fatalf("3 MiB placed at %#x, want %#x", b.Address(), bs[1].Address())
	}
	a.Free(b)
	a.Free(bs[0])
	a.Free(bs[4])
	mustCheck(t, a)
	s = a.Stats()
	if s.InactiveSplit.Current != 0 || s.Segment.Current != 1 || s.AllocatedBytes.Current != 0 {
		t.Fatalf("all free: %+v", s)
	}
	a.EmptyCache()
	if s := a.Stats(); s.Segment.Current != 0 || s.ReservedBytes.Current != 0 || s.NumDeviceFree != 1 {
		t.Fatalf("after EmptyCache: %+v", s)
	}
	// Best fit prefers the smallest block that fits, then the lowest address.
	a = Meta().Alloc
	x := mustAlloc(t, a, 512*kib, Tag{})
	y := mustAlloc(t, a, 256*kib, Tag{})
	z := mustAlloc(t, a, 256*kib, Tag{})
	w := mustAlloc(t, a, 256*kib, Tag{})
	a.Free(x) // free 512 KiB at the start
	a.Free(z) // free 256 KiB in the middle
	got := mustAlloc(t, a, 200*kib, Tag{})
	if got.Address() != z.Address() {
		t.Fatalf("200 KiB went to %#x, want the 256 KiB hole at %#x", got.Address(), z.Address())
	}
	_, _ = y, w
	mustCheck(t, a)
}

// Random sequences of allocations, frees, arenas and arena tensors keep
// the structure consistent and the statistics equal to the sums, on cpu
// (with the data checked for overlaps) and on meta (with equal statistics).
func TestRandomSequences(t *testing.T) {
	var retries, ooms int64
	for seed := int64(1); seed <= 6; seed++ {
		cpu, err := New("cpu:mem=256MiB")
		if err != nil {
			t.Fatal(err)
		}
		meta, _ := New("meta:mem=256MiB")
		runRandom(t, seed, cpu.Alloc, meta.Alloc, 500)
		st := cpu.Alloc.Stats()
		retries += st.NumAllocRetries
		ooms += st.NumOOMs
		// Drain and release: nothing may stay.
		if st := cpu.Alloc.Stats(); st.AllocatedBytes.Current != 0 || st.ReservedBytes.Current != 0 {
			t.Fatalf("seed %d: after draining: allocated %d reserved %d", seed, st.AllocatedBytes.Current, st.ReservedBytes.Current)
		}
	}
	// The sequences reach the capacity: both paths are exercised.
	if retries == 0 || ooms == 0 {
		t.Fatalf("%d retries, %d OOMs: the sequences never reach the capacity", retries, ooms)
	}
	t.Logf("%d retries, %d OOMs", retries, ooms)
}

type liveBlock struct {
	cpu, meta *Block
	fill      byte
	arena     bool
	tensors   map[int64]int64 // arena: offset -> size
}

func runRandom(t *testing.T, seed int64, cpu, meta *Allocator, steps int) {
	t.Helper()
	r := rand.New(rand.NewSource(seed))
	var live []*liveBlock
	sizes := func() int64 {
		switch r.Intn(6) {
		case 0:
			return r.Int63n(2 * kib)
		case 1, 2:
			return r.Int63n(mib) + 1
		case 3:
			return mib + r.Int63n(9*mib)
		case 4:
			return 10*mib + r.Int63n(20*mib)
		}
		return r.Int63n(64 * kib)
	}
	// The data under each live block carries its fill byte at both ends,
	// and no other block's writes may reach it.
	ends := func(d []byte) []int {
		if len(d) == 0 {
			return nil
		}
		return []int{0, len(d) / 2, len(d) - 1}
	}
	verify := func(lb *liveBlock) {
		for _, i := range ends(lb.cpu.Data) {
			if v := lb.cpu.Data[i]; v != lb.fill {
				t.Fatalf("seed %d: block at %#x byte %d is %d, want %d: another block overlapped it", seed, lb.cpu.Address(), i, v, lb.fill)
			}
		}
	}
	// No two live blocks overlap (addresses are real pointers on cpu).
	noOverlap := func(step int) {
		type span struct{ lo, hi int64 }
		var spans []span
		for _, lb := range live {
			if lb.cpu.Data != nil && uintptrOf(lb.cpu.Data) != lb.cpu.Address() {
				t.Fatalf("seed %d step %d: data at %#x, address %#x", seed, step, uintptrOf(lb.cpu.Data), lb.cpu.Address())
			}
			spans = append(spans, span{lb.cpu.Address(), lb.cpu.Address() + lb.cpu.Size})
		}
		sort.Slice(spans, func(i, j int) bool { return spans[i].lo < spans[j].lo })
		for i := 1; i < len(spans); i++ {
			if spans[i].lo < spans[i-1].hi {
				t.Fatalf("seed %d step %d: live blocks [%#x,%#x) and [%#x,%#x) overlap", seed, step, spans[i-1].lo, spans[i-1].hi, spans[i].lo, spans[i].hi)
			}
		}
	}
	for step := 0; step < steps; step++ {
		op := r.Intn(10)
		switch {
		case op < 5 || len(live) == 0: // allocate or reserve
			n := sizes()
			arena := r.Intn(5) == 0
			tag := Tag{Category: Category(r.Intn(int(numCategories))), Module: "m", Op: "op"}
			var bc, bm *Block
			var ec, em error
			if arena {
				bc, ec = cpu.Reserve(n, tag)
				bm, em = meta.Reserve(n, tag)
			} else {
				bc, ec = cpu.Allocate(n, tag)
				bm, em = meta.Allocate(n, tag)
			}
			if (ec == nil) != (em == nil) {
				t.Fatalf("seed %d step %d: cpu %v, meta %v", seed, step, ec, em)
			}
			if ec != nil {
				if !errors.Is(ec, ErrOutOfMemory) {
					t.Fatal(ec)
				}
				break
			}
			for _, i := range append(ends(bc.Data), r.Intn(len(bc.Data)+1)-1) {
				if i >= 0 && bc.Data[i] != 0 {
					t.Fatalf("seed %d step %d: block not zeroed", seed, step)
				}
			}
			if bc.Size != bm.Size {
				t.Fatalf("seed %d step %d: cpu block %d, meta %d", seed, step, bc.Size, bm.Size)
			}
			lb := &liveBlock{cpu: bc, meta: bm, fill: byte(step%250 + 1), arena: arena, tensors: map[int64]int64{}}
			for _, i := range ends(bc.Data) {
				bc.Data[i] = lb.fill
			}
			live = append(live, lb)
		case op < 8: // free or release
			i := r.Intn(len(live))
			lb := live[i]
			verify(lb)
			if lb.arena {
				cpu.Release(lb.cpu)
				meta.Release(lb.meta)
			} else {
				cpu.Free(lb.cpu)
				meta.Free(lb.meta)
			}
			live = append(live[:i], live[i+1:]...)
		case op < 9: // track or untrack a tensor in an arena
			var arenas []*liveBlock
			for _, lb := range live {
				if lb.arena {
					arenas = append(arenas, lb)
				}
			}
			if len(arenas) == 0 {
				break
			}
			lb := arenas[r.Intn(len(arenas))]
			off := r.Int63n(lb.cpu.Size/512) * 512
			if _, ok := lb.tensors[off]; ok && r.Intn(2) == 0 {
				cpu.UntrackIn(lb.cpu, off)
				meta.UntrackIn(lb.meta, off)
				delete(lb.tensors, off)
				break
			}
			if _, ok := lb.tensors[off]; ok {
				break
			}
			size := int64(512 * (1 + r.Intn(8)))
			ok := off+size <= lb.cpu.Size
			for o, s := range lb.tensors {
				ok = ok && (off+size <= o || o+s <= off)
			}
			if !ok {
				break
			}
			tag := Tag{Category: Activation, Module: "arena", Op: "t"}
			cpu.TrackIn(lb.cpu, off, size, size-7, tag)
			meta.TrackIn(lb.meta, off, size, size-7, tag)
			lb.tensors[off] = size
		default:
			cpu.EmptyCache()
			meta.EmptyCache()
			for i, used := range cpu.liveSegments() {
				if !used {
					t.Fatalf("seed %d step %d: segment %d has no live block after EmptyCache", seed, step, i)
				}
			}
		}
		mustCheck(t, cpu)
		mustCheck(t, meta)
		noOverlap(step)
		// The simple model: allocated bytes are the live blocks' sizes plus
		// the tracked tensors; requested likewise.
		var alloc, req, n int64
		for _, lb := range live {
			if lb.arena {
				for _, s := range lb.tensors {
					alloc += s
					req += s - 7
					n++
				}
				continue
			}
			alloc += lb.cpu.Size
			req += lb.cpu.Requested
			n++
		}
		sc, sm := cpu.MemoryStats(), meta.MemoryStats()
		if sc["allocated_bytes.all.current"] != alloc || sc["requested_bytes.all.current"] != req || sc["allocation.all.current"] != n {
			t.Fatalf("seed %d step %d: stats allocated %d requested %d count %d; model %d %d %d", seed, step,
				sc["allocated_bytes.all.current"], sc["requested_bytes.all.current"], sc["allocation.all.current"], alloc, req, n)
		}
		if !reflect.DeepEqual(sc, sm) {
			for k, v := range sc {
				if sm[k] != v {
					t.Errorf("%s: cpu %d, meta %d", k, v, sm[k])
				}
			}
			t.Fatalf("seed %d step %d: cpu and meta statistics differ", seed, step)
		}
	}
	for _, lb := range live {
		verify(lb)
		if lb.arena {
			cpu.Release(lb.cpu)
			meta.Release(lb.meta)
		} else {
			cpu.Free(lb.cpu)
			meta.Free(lb.meta)
		}
	}
	cpu.EmptyCache()
	meta.EmptyCache()
	mustCheck(t, cpu)
	mustCheck(t, meta)
}

// A mapping that does not fit first releases every fully cached segment and
// retries (num_alloc_retries); when that fails too, the error is typed and
// says which capacity would fit.
func TestRetryThenOOM(t *testing.T) {
	d, _ := New("cpu:mem=24MiB")
	a := d.Alloc
	a.RecordHistory(100)
	big := mustAlloc(t, a, 2*mib, Tag{Category: Activation}) // a 20 MiB large segment
	a.Free(big)                                              // cached
	p := mustAlloc(t, a, 512, Tag{Category: Parameter})      // a 2 MiB small segment: 22 MiB reserved
	if s := a.Stats(); s.ReservedBytes.Current != 22*mib || s.NumAllocRetries != 0 {
		t.Fatalf("reserved %d retries %d", s.ReservedBytes.Current, s.NumAllocRetries)
	}
	// 22 MiB needs a 22 MiB segment: 44 MiB > 24 MiB, so the cached 20 MiB
	// segment goes and the retry succeeds.
	g := mustAlloc(t, a, 22*mib, Tag{Category: Gradient, Module: "fc", Op: "fc.weight"})
	s := a.Stats()
	if s.NumAllocRetries != 1 || s.NumOOMs != 0 || s.ReservedBytes.Current != 24*mib || s.Segment.Current != 2 || s.NumDeviceFree != 1 {
		t.Fatalf("after retry: %+v", s)
	}
	mustCheck(t, a)
	// 12 MiB: no cached block fits, nothing is fully cached, the retry fails.
	_, err := a.Allocate(12*mib, Tag{Category: Activation, Module: "layer1", Op: "conv2d"})
	var oom *OutOfMemoryError
	if !errors.As(err, &oom) || !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("want an out-of-memory error, got %v", err)
	}
	s = a.Stats()
	if s.NumAllocRetries != 2 || s.NumOOMs != 1 {
		t.Fatalf("retries %d ooms %d", s.NumAllocRetries, s.NumOOMs)
	}
	want := OutOfMemoryError{
		Device: "cpu", Tag: Tag{Category: Activation, Module: "layer1", Op: "conv2d"},
		Requested: 12 * mib, Size: 12 * mib, Pool: "large", SegmentSize: 12 * mib,
		Allocated: 22*mib + 512, Reserved: 24 * mib, ReservedButUnallocated: 2*mib - 512,
		FreeCached: 0, LargestFreeBlock: 0, Capacity: 24 * mib, Fraction: 1, Limit: 24 * mib,
		ByCategory: map[string]int64{"parameter": 512, "gradient": 22 * mib},
		Fragmented: false, Suggested: 36 * mib,
	}
	if !reflect.DeepEqual(*oom, want) {
		t.Fatalf("OOM error\n got %+v\nwant %+v", *oom, want)
	}
	msg := err.Error()
	for _, frag := range []string{"tried to allocate 12.00 MiB for activation (layer1 conv2d)", "Limit 24.00 MiB", "22.00 MiB allocated (gradient 22.00 MiB, parameter 512 B)", "set a capacity of at least 36.00 MiB (cpu:mem=36MiB)", "new 12.00 MiB segment"} {
		if !strings.Contains(msg, frag) {
			t.Errorf("message lacks %q:\n%s", frag, msg)
		}
	}
	var actions []string
	for _, e := range a.History() {
		actions = append(actions, e.Action)
	}
	wantActions := "segment_alloc alloc free segment_alloc alloc segment_free segment_alloc alloc oom"
	if got := strings.Join(actions, " "); got != wantActions {
		t.Fatalf("history %q, want %q", got, wantActions)
	}
	// At the suggested capacity the same request fits.
	if err := a.SetCapacity(oom.SuggestedCapacity()); err != nil {
		t.Fatal(err)
	}
	b := mustAlloc(t, a, 12*mib, Tag{})
	a.Free(b)
	a.Free(g)
	a.Free(p)
	mustCheck(t, a)
}

func TestOOMFragmentation(t *testing.T) {
	a := Meta().Alloc
	if err := a.SetCapacity(20 * mib); err != nil {
		t.Fatal(err)
	}
	var bs []*Block
	for range 5 {
		bs = append(bs, mustAlloc(t, a, 4*mib, Tag{Category: Activation}))
	}
	a.Free(bs[0])
	a.Free(bs[2])
	_, err := a.Allocate(6*mib, Tag{Category: Temporary})
	var oom *OutOfMemoryError
	if !errors.As(err, &oom) {
		t.Fatalf("want OOM, got %v", err)
	}
	if !oom.Fragmented || oom.FreeCached != 8*mib || oom.LargestFreeBlock != 4*mib || oom.ReservedButUnallocated != 8*mib || oom.Suggested != 40*mib {
		t.Fatalf("%+v", oom)
	}
	if msg := oom.Error(); !strings.Contains(msg, "Fragmentation is the cause") || !strings.Contains(msg, "the largest 4.00 MiB") {
		t.Fatalf("message: %s", msg)
	}
}

func TestMemoryFraction(t *testing.T) {
	a := Meta().Alloc
	_ = a.SetCapacity(40 * mib)
	if err := a.SetMemoryFraction(0.5); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []float64{-0.1, 1.5} {
		if err := a.SetMemoryFraction(bad); err == nil {
			t.Errorf("SetMemoryFraction(%v) accepted", bad)
		}
	}
	if a.Limit() != 20*mib || a.MemoryFraction() != 0.5 {
		t.Fatalf("limit %d", a.Limit())
	}
	mustAlloc(t, a, 2*mib, Tag{}) // the 20 MiB segment: the whole limit
	_, err := a.Allocate(100, Tag{})
	var oom *OutOfMemoryError
	if !errors.As(err, &oom) || oom.Suggested != 22*mib || oom.SuggestedCapacity() != 44*mib {
		t.Fatalf("got %v", err)
	}
	if !strings.Contains(err.Error(), "capacity 40.00 MiB x memory fraction 0.5") || !strings.Contains(err.Error(), "meta:mem=44MiB") {
		t.Fatalf("message: %v", err)
	}
}

func TestArenaTracking(t *testing.T) {
	a := CPU().Alloc
	p := mustAlloc(t, a, 1000, Tag{Category: Parameter})
	arena, err := a.Reserve(100*kib, Tag{Category: Activation, Op: "arena"})
	if err != nil {
		t.Fatal(err)
	}
	if len(arena.Data) != 100*1024 || arena.Size != 100*kib {
		t.Fatalf("arena %d/%d", len(arena.Data), arena.Size)
	}
	s := a.Stats()
	// The arena is reserved (a 2 MiB segment of the large pool), not allocated.
	if s.AllocatedBytes.Current != 1024 || s.ReservedBytes.Large.Current != 2*mib || s.Allocation.Current != 1 {
		t.Fatalf("after Reserve: %+v", s)
	}
	a.TrackIn(arena, 0, 4096, 4000, Tag{Category: Activation, Module: "fc1", Op: "linear"})
	a.TrackIn(arena, 8192, 1024, 1024, Tag{Category: Input, Op: "x"})
	s = a.Stats()
	if s.AllocatedBytes.Current != 1024+5120 || s.AllocatedBytes.Large.Current != 5120 || s.RequestedBytes.Large.Current != 5024 ||
		s.Allocation.Large.Current != 2 || s.ByCategory[Activation] != 4096 || s.ByCategory[Input] != 1024 {
		t.Fatalf("after TrackIn: %+v", s)
	}
	mustCheck(t, a)
	a.UntrackIn(arena, 0)
	if s := a.Stats(); s.AllocatedBytes.Current != 2048 || s.ByCategory[Activation] != 0 || s.ByCategoryAtPeak[Activation] != 4096 {
		t.Fatalf("after UntrackIn: %+v", s)
	}
	a.Release(arena) // counts the tensor still tracked as freed
	mustCheck(t, a)
	if s := a.Stats(); s.AllocatedBytes.Current != 1024 || s.Allocation.Current != 1 || s.ReservedBytes.Current != 4*mib {
		t.Fatalf("after Release: %+v", s)
	}
	// The released arena's block is reused by the next reservation.
	again, err := a.Reserve(50*kib, Tag{})
	if err != nil || again.Address() != arena.Address() {
		t.Fatalf("reuse: %v at %#x, want %#x", err, again.Address(), arena.Address())
	}
	a.Release(again)
	a.Free(p)
	a.EmptyCache()
	if s := a.Stats(); s.ReservedBytes.Current != 0 {
		t.Fatalf("reserved %d", s.ReservedBytes.Current)
	}
}

func TestMisuse(t *testing.T) {
	a := Meta().Alloc
	b := mustAlloc(t, a, 10, Tag{})
	a.Free(b)
	a.Free(b) // a second Free is a no-op
	a.Free(nil)
	a.Release(nil)
	r, _ := a.Reserve(10, Tag{})
	other := Meta().Alloc
	ob := mustAlloc(t, other, 10, Tag{})
	for name, f := range map[string]func(){
		"Free of a reservation":         func() { a.Free(r) },
		"Free from another allocator":   func() { a.Free(ob) },
		"TrackIn outside the arena":     func() { a.TrackIn(r, 0, 1024, 1024, Tag{}) },
		"UntrackIn of nothing":          func() { a.UntrackIn(r, 0) },
		"Release of an allocated block": func() { a.Release(ob) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s did not panic", name)
				}
			}()
			f()
		}()
	}
	if _, err := a.Allocate(-1, Tag{}); err == nil {
		t.Error("negative size accepted")
	}
	mustCheck(t, a)
}

// The same sequence gives the same statistics and the same snapshot (but
// for addresses) on cpu and meta.
func TestMetaMatchesCPU(t *testing.T) {
	run := func(d *Device) (map[string]int64, *Snapshot) {
		a := d.Alloc
		a.RecordHistory(1000)
		var bs []*Block
		for i, n := range []int64{1000, 5000, 3 * mib, 700 * kib, 12 * mib, 300} {
			bs = append(bs, mustAlloc(t, a, n, Tag{Category: Category(i % 3), Module: "m", Op: "o"}))
		}
		arena, err := a.Reserve(5*mib, Tag{Category: Activation})
		if err != nil {
			t.Fatal(err)
		}
		a.TrackIn(arena, 0, 2*mib, 2*mib, Tag{Category: Activation, Module: "l1", Op: "relu"})
		a.TrackIn(arena, 3*mib, 1024, 1000, Tag{Category: Workspace})
		a.Free(bs[1])
		a.Free(bs[4])
		a.UntrackIn(arena, 0)
		a.EmptyCache()
		return a.MemoryStats(), a.Snapshot()
	}
	sc, snc := run(CPU())
	sm, snm := run(Meta())
	if !reflect.DeepEqual(sc, sm) {
		t.Fatalf("statistics differ:\ncpu  %v\nmeta %v", sc, sm)
	}
	strip := func(s *Snapshot) *Snapshot {
		c := *s
		c.Segments = nil
		for _, seg := range s.Segments {
			base := seg.Address
			seg.Address = 0
			blocks := make([]BlockInfo, len(seg.Blocks))
			for i, b := range seg.Blocks {
				b.Address -= base
				blocks[i] = b
			}
			seg.Blocks = blocks
			c.Segments = append(c.Segments, seg)
		}
		c.DeviceTraces = nil
		c.Headroom.Device = ""
		return &c
	}
	a, b := strip(snc), strip(snm)
	if len(a.Segments) != len(b.Segments) {
		t.Fatalf("%d segments on cpu, %d on meta", len(a.Segments), len(b.Segments))
	}
	// Segment order follows addresses, which differ; compare as sets.
	key := func(s SegmentInfo) string { r, _ := jsonString(s); return r }
	seen := map[string]int{}
	for _, s := range a.Segments {
		seen[key(s)]++
	}
	for _, s := range b.Segments {
		seen[key(s)]--
	}
	for k, v := range seen {
		if v != 0 {
			t.Fatalf("segment differs between cpu and meta: %s", k)
		}
	}
	a.Segments, b.Segments = nil, nil
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("snapshots differ:\n%+v\n%+v", a, b)
	}
	if len(snc.DeviceTraces[0]) != len(snm.DeviceTraces[0]) {
		t.Fatalf("history lengths differ")
	}
	for i, e := range snc.DeviceTraces[0] {
		m := snm.DeviceTraces[0][i]
		if e.Action != m.Action || e.Size != m.Size || e.BlockSize != m.BlockSize || e.Category != m.Category || e.Module != m.Module || e.Op != m.Op || e.Pool != m.Pool {
			t.Fatalf("history entry %d: cpu %+v, meta %+v", i, e, m)
		}
	}
}
