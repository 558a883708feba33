package dataset

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// synth is a map source of small images whose pixels encode their index,
// so a batch shows which samples it holds and where.
type synth struct {
	n, c, h, w int
	bad        map[int]bool // Get fails with a SampleError
	broken     map[int]bool // Get fails with a plain error
	sizes      map[int][2]int
	delay      time.Duration
	gets       atomic.Int64
}

func (s *synth) Len() int { return s.n }

func (s *synth) Get(i int, ex *Example) error {
	s.gets.Add(1)
	if s.delay > 0 {
		time.Sleep(s.delay)
	}
	if s.bad[i] {
		return &SampleError{File: fmt.Sprintf("img%03d.png", i), Offset: -1, Index: -1, Err: errors.New("corrupt")}
	}
	if s.broken[i] {
		return fmt.Errorf("disk on fire reading %d", i)
	}
	h, w := s.h, s.w
	if sz, ok := s.sizes[i]; ok {
		h, w = sz[0], sz[1]
	}
	x := ex.growX(s.c * h * w)
	for j := range x {
		x[j] = float32(i) + float32(j)/1000
	}
	ex.setShape(s.c, h, w)
	ex.Y = append(ex.Y[:0], int64(i%10))
	ex.Tokens = ex.Tokens[:0]
	return nil
}

// drain reads batches until the epoch ends, copying them.
type copied struct {
	Epoch, Step, N int
	X              []float32
	Y              []int64
}

func drain(t *testing.T, l *Loader, ctx context.Context) []copied {
	t.Helper()
	var out []copied
	for {
		b, err := l.Next(ctx)
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		out = append(out, copied{b.Epoch, b.Step, b.N, slices.Clone(b.X), slices.Clone(b.Y)})
	}
}

func newLoader(t *testing.T, src MapSource, cfg Config) *Loader {
	t.Helper()
	l, err := NewLoader(src, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

var augment = []Transform{
	RandomCrop{Height: 6, Width: 6, Padding: 2},
	HorizontalFlip{},
	Resize{Height: 5, Width: 7},
	Normalize{Mean: []float32{0.5, 1, 2}, Std: []float32{2, 3, 4}},
}

func TestLoaderMatchesSampler(t *testing.T) {
	for _, dropLast := range []bool{false, true} {
		src := &synth{n: 23, c: 1, h: 2, w: 2}
		cfg := Config{BatchSize: 5, Shuffle: true, Seed: 9, DropLast: dropLast, Workers: 3, Depth: 3}
		l := newLoader(t, src, cfg)
		smp := Sampler{N: 23, BatchSize: 5, Shuffle: true, Seed: 9, DropLast: dropLast}
		for epoch := range 2 {
			got := drain(t, l, context.Background())
			var want [][]int
			for b := range smp.Epoch(epoch) {
				want = append(want, b)
			}
			if len(got) != len(want) || l.NumBatches() != len(want) {
				t.Fatalf("dropLast %v epoch %d: %d batches, want %d", dropLast, epoch, len(got), len(want))
			}
			for k, b := range got {
				if b.Epoch != epoch || b.Step != k || b.N != len(want[k]) || len(b.X) != b.N*4 || len(b.Y) != b.N {
					t.Fatalf("batch %d: epoch %d step %d N %d len(X) %d, want epoch %d step %d N %d", k, b.Epoch, b.Step, b.N, len(b.X), epoch, k, len(want[k]))
				}
				for p, i := range want[k] {
					if b.X[p*4] != float32(i) || b.Y[p] != int64(i%10) {
						t.Fatalf("epoch %d batch %d position %d holds sample %v (label %d), want %d", epoch, k, p, b.X[p*4], b.Y[p], i)
					}
				}
			}
		}
		if st := l.Stats(); st.Batches != int64(2*smp.NumBatches()) || st.Skipped != 0 {
			t.Errorf("stats %+v", st)
		}
	}
}

// The augmentations are seeded per (epoch, sample): the worker count does
// not change a single value.
func TestLoaderWorkersDoNotChangeBatches(t *testing.T) {
	run := func(workers int) []copied {
		src := &synth{n: 37, c: 3, h: 8, w: 8}
		l := newLoader(t, src, Config{BatchSize: 4, Shuffle: true, Seed: 3, Workers: workers, Depth: 3, Transforms: augment})
		var all []copied
		for range 2 {
			all = append(all, drain(t, l, context.Background())...)
		}
		return all
	}
	one, four := run(1), run(4)
	if len(one) != 20 {
		t.Fatalf("%d batches, want 20", len(one))
	}
	for k := range one {
		if !slices.Equal(one[k].X, four[k].X) || !slices.Equal(one[k].Y, four[k].Y) {
			t.Fatalf("batch %d differs between 1 and 4 workers", k)
		}
	}
	// And the augmentations do something, differently per epoch.
	if slices.Equal(one[0].X, one[10].X) {
		t.Error("epochs 0 and 1 start with identical augmented batches")
	}
}

func TestLoaderResume(t *testing.T) {
	src := &synth{n: 30, c: 3, h: 8, w: 8}
	cfg := Config{BatchSize: 4, Shuffle: true, Seed: 5, Workers: 2, Depth: 2, Transforms: augment}
	full := newLoader(t, src, cfg)
	var want []copied
	for range 2 {
		want = append(want, drain(t, full, context.Background())...)
	}
	perEpoch := full.NumBatches()
	for _, k := range []int{0, 1, 5, perEpoch - 1, perEpoch, perEpoch + 3} {
		c := cfg
		c.Start = State{Epoch: k / perEpoch, Step: k % perEpoch}
		c.Workers = 3
		l := newLoader(t, src, c)
		got := drain(t, l, context.Background())
		if c.Start.Epoch == 0 {
			got = append(got, drain(t, l, context.Background())...)
		}
		if len(got) != len(want)-k {
			t.Fatalf("resumed at %d: %d batches, want %d", k, len(got), len(want)-k)
		}
		for j := range got {
			w := want[k+j]
			if got[j].Epoch != w.Epoch || got[j].Step != w.Step || !slices.Equal(got[j].X, w.X) || !slices.Equal(got[j].Y, w.Y) {
				t.Fatalf("resumed at %d: batch %d differs from the uninterrupted run's", k, j)
			}
		}
	}
}

// A state taken mid-epoch from a live loader resumes exactly.
func TestLoaderStateMidEpoch(t *testing.T) {
	src := &synth{n: 30, c: 3, h: 8, w: 8}
	cfg := Config{BatchSize: 4, Shuffle: true, Seed: 5, Workers: 2, Transforms: augment}
	l := newLoader(t, src, cfg)
	want := drain(t, l, context.Background())
	l2 := newLoader(t, src, cfg)
	for range 3 {
		if _, err := l2.Next(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	st := l2.State()
	if st != (State{0, 3}) {
		t.Fatalf("state after 3 batches %+v", st)
	}
	cfg.Start = st
	got := drain(t, newLoader(t, src, cfg), context.Background())
	if len(got) != len(want)-3 || !slices.Equal(got[0].X, want[3].X) || !slices.Equal(got[len(got)-1].Y, want[len(want)-1].Y) {
		t.Fatalf("resume from %+v: %d batches, want %d, or contents differ", st, len(got), len(want)-3)
	}
}

// settle reports whether the goroutine count came back to n. Close waits
// for the loader's goroutines, so no waiting should be needed; the loop only
// covers the runtime's own bookkeeping.
func settle(n int) bool {
	for range 100 {
		if runtime.NumGoroutine() <= n {
			return true
		}
		runtime.Gosched()
		time.Sleep(time.Millisecond)
	}
	return false
}

func TestLoaderWorkerError(t *testing.T) {
	for _, tt := range []struct {
		name string
		src  *synth
		want string
	}{
		{"sample error", &synth{n: 40, c: 1, h: 2, w: 2, bad: map[int]bool{17: true}}, "img017.png: sample 17: corrupt"},
		{"io error", &synth{n: 40, c: 1, h: 2, w: 2, broken: map[int]bool{17: true}}, "disk on fire reading 17"},
		{"shape", &synth{n: 40, c: 1, h: 2, w: 2, sizes: map[int][2]int{17: {3, 2}}}, "sample: sample 17: sample shape differs from the batch's: [1 3 2] becomes [1 3 2], the batch holds [1 2 2]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			base := runtime.NumGoroutine()
			l, err := NewLoader(tt.src, Config{BatchSize: 3, Workers: 4, Depth: 3})
			if err != nil {
				t.Fatal(err)
			}
			var got error
			for range 100 {
				if _, got = l.Next(context.Background()); got != nil {
					break
				}
			}
			if got == nil || !strings.Contains(got.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", got, tt.want)
			}
			if _, again := l.Next(context.Background()); again != got {
				t.Errorf("the next Next returned %v, want the same error", again)
			}
			l.Close()
			if !settle(base) {
				t.Errorf("%d goroutines after Close, %d before", runtime.NumGoroutine(), base)
			}
			if _, err := l.Next(context.Background()); !errors.Is(err, ErrClosed) {
				t.Errorf("Next after Close: %v", err)
			}
		})
	}
}

func TestLoaderSkipBad(t *testing.T) {
	src := &synth{n: 10, c: 1, h: 1, w: 1, bad: map[int]bool{1: true, 4: true, 5: true, 6: true}}
	l := newLoader(t, src, Config{BatchSize: 3, Workers: 2, SkipBad: true})
	got := drain(t, l, context.Background())
	// Batches [0 1 2] [3 4 5] [6 7 8] [9]; batch 1 keeps only 3.
	want := [][]float32{{0, 2}, {3}, {7, 8}, {9}}
	if len(got) != len(want) {
		t.Fatalf("%d batches, want %d", len(got), len(want))
	}
	for k := range got {
		if !slices.Equal(got[k].X, want[k]) || got[k].N != len(want[k]) {
			t.Errorf("batch %d holds %v, want %v", k, got[k].X, want[k])
		}
	}
	if s := l.Stats().Skipped; s != 4 {
		t.Errorf("skipped %d, want 4", s)
	}
	// A plain error is not skippable.
	src2 := &synth{n: 10, c: 1, h: 1, w: 1, bad: src.bad, broken: map[int]bool{8: true}}
	l2 := newLoader(t, src2, Config{BatchSize: 3, SkipBad: true})
	var err error
	for err == nil {
		_, err = l2.Next(context.Background())
	}
	if err == io.EOF || !strings.Contains(err.Error(), "disk on fire") {
		t.Errorf("error %v, want the I/O error", err)
	}
}

func TestLoaderCancel(t *testing.T) {
	base := runtime.NumGoroutine()
	src := &synth{n: 60, c: 1, h: 2, w: 2, delay: 200 * time.Microsecond}
	cfg := Config{BatchSize: 4, Shuffle: true, Seed: 1, Workers: 3, Depth: 4}
	l0 := newLoader(t, src, cfg)
	want := drain(t, l0, context.Background())
	l0.Close() // its pipeline runs on into epoch 1

	l, err := NewLoader(src, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var got []copied
	for range 2 {
		b, err := l.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, copied{b.Epoch, b.Step, b.N, slices.Clone(b.X), slices.Clone(b.Y)})
	}
	cancel()
	if _, err := l.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next after cancel: %v", err)
	}
	// The workers are stopped...
	if !settle(base) {
		t.Errorf("%d goroutines after cancellation, %d before", runtime.NumGoroutine(), base)
	}
	// ...and the loader continues from where it was.
	if st := l.State(); st != (State{0, 2}) {
		t.Fatalf("state %+v after cancellation", st)
	}
	got = append(got, drain(t, l, context.Background())...)
	if len(got) != len(want) {
		t.Fatalf("%d batches, want %d", len(got), len(want))
	}
	for k := range got {
		if !slices.Equal(got[k].X, want[k].X) {
			t.Fatalf("batch %d differs after the restart", k)
		}
	}
	l.Close()
	if !settle(base) {
		t.Errorf("%d goroutines after Close, %d before", runtime.NumGoroutine(), base)
	}
}

// Staging comes from the caller's allocator, Depth buffers of each kind,
// once; the memory report adds up.
func TestLoaderStagingAllocatedOnce(t *testing.T) {
	var calls []string
	var freed int
	alloc := func(what string, n int64) ([]byte, func(), error) {
		calls = append(calls, fmt.Sprintf("%s:%d", what, n))
		b, _, err := SliceAlloc(what, n)
		return b, func() { freed++ }, err
	}
	src := &synth{n: 50, c: 3, h: 8, w: 8}
	cfg := Config{BatchSize: 4, Workers: 2, Depth: 3, Transforms: augment, Alloc: alloc}
	l, err := NewLoader(src, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		drain(t, l, context.Background())
	}
	in := fmt.Sprintf("inputs:%d", 4*3*5*7*4)
	tg := fmt.Sprintf("targets:%d", 4*8)
	want := []string{in, tg, in, tg, in, tg}
	if !slices.Equal(calls, want) {
		t.Errorf("allocations %v, want %v", calls, want)
	}
	m := l.Memory()
	if m.StagingBuffer != 4*3*5*7*4+4*8 || m.Depth != 3 || m.Staging() != 3*m.StagingBuffer {
		t.Errorf("memory %+v", m)
	}
	if m.StagingInputs != 4*3*5*7*4 || m.StagingTargets != 4*8 {
		t.Errorf("staging allocations %d + %d, the loader asked %v", m.StagingInputs, m.StagingTargets, calls)
	}
	// One buffer of the input and one of the largest transform output
	// (the 3x6x6 crop).
	if m.Shuffle != 8*50 || m.Workers != 2 || m.ScratchPerWorker < (3*8*8+3*6*6)*4 {
		t.Errorf("memory %+v", m)
	}
	if m.Total() != m.Staging()+m.Shuffle+2*m.ScratchPerWorker {
		t.Errorf("total %d", m.Total())
	}
	pm, err := PlanMemory(src, cfg)
	if err != nil || pm != m {
		t.Errorf("PlanMemory = %+v, %v; the loader holds %+v", pm, err, m)
	}
	l.Close()
	if freed != 6 {
		t.Errorf("Close freed %d buffers, want 6", freed)
	}
}

// In the steady state a batch costs no allocation: staging, scratch and
// the example buffers are all reused.
func TestLoaderNoAllocationPerBatch(t *testing.T) {
	if testing.Short() {
		t.Skip("reads many batches")
	}
	src := &synth{n: 100000, c: 3, h: 8, w: 8}
	l := newLoader(t, src, Config{BatchSize: 8, Workers: 2, Depth: 3, Transforms: augment})
	ctx := context.Background()
	for range 10 { // warm up: buffers grow to size
		if _, err := l.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := l.Next(ctx); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 0.05 {
		t.Errorf("%.2f allocations per batch, want 0", allocs)
	}
}

// A batch is ready only when collated; the consumer's wait is measured.
func TestLoaderWaitMeasured(t *testing.T) {
	src := &synth{n: 8, c: 1, h: 1, w: 1, delay: time.Millisecond}
	l := newLoader(t, src, Config{BatchSize: 4})
	drain(t, l, context.Background())
	if l.Stats().Wait <= 0 {
		t.Errorf("wait %v, want > 0", l.Stats().Wait)
	}
}

func TestLoaderConfigErrors(t *testing.T) {
	src := &synth{n: 8, c: 3, h: 4, w: 4}
	for _, cfg := range []Config{
		{BatchSize: 0},
		{BatchSize: 2, Workers: -1},
		{BatchSize: 2, Transforms: []Transform{RandomCrop{Height: 9, Width: 9}}},
		{BatchSize: 2, Transforms: []Transform{Normalize{Mean: []float32{1, 2}, Std: []float32{1, 1}}}},
		{BatchSize: 2, Alloc: func(string, int64) ([]byte, func(), error) { return nil, nil, errors.New("no memory") }},
		{BatchSize: 2, Alloc: func(_ string, n int64) ([]byte, func(), error) {
			b, _, _ := SliceAlloc("", n+1)
			return b[1:], nil, nil
		}},
	} {
		if _, err := NewLoader(src, cfg); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
	if _, err := NewLoader(&synth{}, Config{BatchSize: 1}); err == nil {
		t.Error("empty source accepted")
	}
}

// A failed allocation gives back the buffers already allocated.
func TestLoaderAllocFailureFrees(t *testing.T) {
	calls, freed := 0, 0
	alloc := func(what string, n int64) ([]byte, func(), error) {
		calls++
		if calls == 4 {
			return nil, nil, errors.New("out of input memory")
		}
		b, _, err := SliceAlloc(what, n)
		return b, func() { freed++ }, err
	}
	_, err := NewLoader(&synth{n: 4, c: 1, h: 2, w: 2}, Config{BatchSize: 2, Depth: 3, Alloc: alloc})
	if err == nil || !strings.Contains(err.Error(), "out of input memory") || freed != 3 {
		t.Errorf("error %v, %d of 3 buffers freed", err, freed)
	}
}

// counting signals when its Get has been called want times.
type counting struct {
	*synth
	want int64
	done chan struct{}
	n    atomic.Int64
}

func (c *counting) Get(i int, ex *Example) error {
	if c.n.Add(1) == c.want {
		close(c.done)
	}
	return c.synth.Get(i, ex)
}

// The pipeline runs on into the next epoch: before the consumer asks for
// it, the first batch of epoch 1 is read into a free staging buffer.
func TestLoaderPrefetchesNextEpoch(t *testing.T) {
	src := &counting{synth: &synth{n: 8, c: 1, h: 1, w: 1}, want: 13, done: make(chan struct{})}
	l := newLoader(t, src, Config{BatchSize: 4, Depth: 3, Workers: 2})
	if got := drain(t, l, t.Context()); len(got) != 2 {
		t.Fatalf("%d batches in epoch 0", len(got))
	}
	select {
	case <-src.done: // the probe, 8 samples of epoch 0, 4 of epoch 1
	case <-time.After(time.Minute): // a guard against hanging, not a timing test
		t.Fatalf("epoch 1 not started: %d samples read", src.n.Load())
	}
	b, err := l.Next(t.Context())
	if err != nil || b.Epoch != 1 || b.Step != 0 || !slices.Equal(b.X, []float32{0, 1, 2, 3}) {
		t.Fatalf("first batch of epoch 1: %+v, %v", b, err)
	}
}

// boundedSynth is a synth that says its largest sample (Bounder).
type boundedSynth struct {
	*synth
	shape []int
}

func (b boundedSynth) SampleBound() (SampleBound, error) { return SampleBound{Shape: b.shape}, nil }

// Images of mixed sizes: the workers' scratch is planned for the largest
// sample the source reports, not for the first one read, and the workers'
// buffers stay within that plan: one buffer of the largest input and one of
// the largest transform output (sample hands the larger back to the
// decoder), not two of the input's size.
func TestLoaderScratchPlannedForLargest(t *testing.T) {
	sizes := map[int][2]int{5: {30, 20}, 9: {12, 40}}
	src := &synth{n: 12, c: 3, h: 8, w: 8, sizes: sizes}
	cfg := Config{BatchSize: 4, Workers: 2, Transforms: []Transform{Resize{Height: 4, Width: 4}, HorizontalFlip{}}}
	small, err := PlanMemory(src, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b := boundedSynth{src, []int{3, 30, 20}}
	m, err := PlanMemory(b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The input buffer, the resized output, and the decoder's image at 4
	// bytes a pixel.
	if want := int64((3*30*20+3*4*4)*4 + 8 + 30*20*4); m.ScratchPerWorker != want || small.ScratchPerWorker >= want {
		t.Errorf("scratch per worker planned %d for the largest sample (want %d), %d for the first", m.ScratchPerWorker, want, small.ScratchPerWorker)
	}
	l := newLoader(t, b, cfg)
	for range 3 {
		drain(t, l, context.Background())
	}
	for i, w := range l.ws {
		if got := 4 * int64(cap(w.ex.X)+cap(w.scratch)); got > 4*int64(3*30*20+3*4*4) {
			t.Errorf("worker %d holds %d bytes of buffers (%d + %d floats), more than planned", i, got, cap(w.ex.X), cap(w.scratch))
		}
	}
}
