package dataset

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// AllocFunc allocates one staging buffer of the given size and returns it
// with the function that frees it (nil when the garbage collector does).
// The loader calls it Depth times per buffer kind ("inputs" or "tokens",
// and "targets") when it is made, never again, and calls the free
// functions from Close: the trainer passes one that allocates from the
// device allocator (category input), tests a plain slice allocator. The
// memory must be 8-byte aligned and stay valid until freed.
type AllocFunc func(what string, bytes int64) (buf []byte, free func(), err error)

// SliceAlloc allocates staging buffers on the Go heap.
func SliceAlloc(_ string, bytes int64) ([]byte, func(), error) {
	// []uint64 storage gives the 8-byte alignment the views need.
	words := make([]uint64, (bytes+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(words))), len(words)*8)[:bytes], nil, nil
}

// Config configures a Loader.
type Config struct {
	BatchSize int
	// Shuffle permutes a map source anew each epoch (Sampler's order for
	// Seed and the epoch) and passes a stream through a shuffle buffer of
	// ShuffleBuffer records.
	Shuffle bool
	Seed    uint64
	// DropLast drops a last batch shorter than BatchSize; otherwise it is
	// delivered short.
	DropLast bool
	// Workers decode and transform in parallel; 0 means 1.
	Workers int
	// Depth is the number of staging buffers: one held by the consumer and
	// Depth-1 being filled ahead. 0 means 2.
	Depth int
	// ShuffleBuffer is the number of records a stream's shuffle buffer
	// holds; 0 means 8 x BatchSize when Shuffle is set.
	ShuffleBuffer int
	// MaxRecordBytes bounds one stream record, for the memory report (a
	// Shards source enforces its own bound); 0 means DefaultMaxRecordBytes.
	MaxRecordBytes int
	// Transforms run in order on each sample, in the workers.
	Transforms []Transform
	// Alloc allocates the staging buffers; nil means SliceAlloc.
	Alloc AllocFunc
	// SkipBad drops samples whose reading fails with a *SampleError,
	// counting them (Stats.Skipped) instead of stopping. The batch holding
	// one is delivered shorter.
	SkipBad bool
	// OnSkip, if set, is told each sample skipped under SkipBad, with its
	// error (naming the file and the member, row or offset). The workers
	// call it concurrently.
	OnSkip func(error)
	// Start is where to resume: the first batch delivered is batch
	// Start.Step of epoch Start.Epoch.
	Start State
}

// State is a position in the data: the next batch to deliver is batch Step
// (0-based) of epoch Epoch.
type State struct{ Epoch, Step int }

// Batch is a collated batch in a staging buffer. It stays valid until the
// next call to Next or Close, which reuse the buffer.
type Batch struct {
	Epoch, Step int
	// N is the number of examples; BatchSize except for a short last
	// batch or skipped samples.
	N int
	// Shape is one example's shape, after the transforms.
	Shape []int
	// X holds the float inputs [N, Shape...]; nil for token sources.
	X []float32
	// Tokens holds token inputs [N, Shape...]; nil for other sources.
	Tokens []int64
	// Y holds the targets: [N] classes or [N, T] next tokens.
	Y []int64
	// Skipped counts samples of this batch dropped under SkipBad.
	Skipped int
}

// Memory is what a loader holds, in bytes, for the memory plan.
type Memory struct {
	// StagingBuffer is one staging buffer (inputs and targets); Depth of
	// them come from Config.Alloc.
	StagingBuffer int64
	Depth         int
	// StagingInputs and StagingTargets are the two allocations one staging
	// buffer is made of, in the order Config.Alloc is asked for them
	// (inputs or tokens, then targets): a device allocator rounds each.
	StagingInputs, StagingTargets int64
	// Shuffle is the shuffle state: a map source's epoch order (8 bytes
	// per sample), or a stream's record pool (shuffle buffer, records
	// being batched and in flight) at MaxRecordBytes each, an upper bound.
	Shuffle int64
	// ScratchPerWorker is one worker's decode and transform buffers (two
	// samples at the largest shape any transform step sees, plus an
	// estimate of the decoder's image at 4 bytes a pixel for images).
	ScratchPerWorker int64
	Workers          int
	// Source is what the source itself keeps in memory (Resident), 0
	// when it does not say.
	Source int64
}

// Staging is StagingBuffer x Depth.
func (m Memory) Staging() int64 { return m.StagingBuffer * int64(m.Depth) }

// Total is everything the loader holds.
func (m Memory) Total() int64 {
	return m.Staging() + m.Shuffle + m.ScratchPerWorker*int64(m.Workers) + m.Source
}

// Stats are the loader's counters.
type Stats struct {
	Batches int64
	// Wait is the total time Next waited for a batch: the time the
	// consumer (the training step) was starved of data.
	Wait time.Duration
	// Skipped counts samples dropped under SkipBad from the batches
	// delivered, plus the stream shards cut short (counted when read,
	// which may be ahead of delivery).
	Skipped int64
}

// ErrClosed is returned by Next after Close.
var ErrClosed = errors.New("dataset: loader closed")

// epochEnd is queued for the consumer after an epoch's last batch.
var epochEnd = new(slot)

// Loader reads batches from a map or stream source with parallel workers
// into a fixed pool of staging buffers.
//
// Determinism: the batches depend only on the source, Config.Seed,
// the epoch and the batch size, never on Workers or scheduling. A map
// source's order is Sampler.Order(epoch); a stream's is its read order
// through a shuffle buffer seeded per epoch; each sample's augmentations
// draw from a generator seeded by (Seed, epoch, sample), where sample is
// the index for a map source and the position in the epoch for a stream.
type Loader struct {
	cfg   Config
	msrc  MapSource
	ssrc  StreamSource
	shape []int // an example's shape after transforms
	in    []int // the probed example's shape before transforms
	elems int   // elements per example (X or Tokens)
	ylen  int   // targets per example
	tok   bool  // token inputs
	most  int   // largest sample (elements) any transform step holds
	// mostOut is the largest transform output (elements).
	mostOut int

	slots   []*slot
	records []*Record // stream record pool
	ws      []worker
	mem     Memory

	state   State
	ep      *epoch
	held    *slot
	err     error // sticky: a worker's error
	closed  bool
	batches int64
	wait    time.Duration
	skipped int64        // samples dropped from delivered batches
	shards  atomic.Int64 // stream parts cut short, counted when read
}

type slot struct {
	x       []float32
	tok     []int64
	y       []int64
	frees   []func()
	batch   Batch
	n       int
	bad     []bool
	pending atomic.Int32
	ready   chan struct{}
}

type worker struct {
	ex      Example
	scratch []float32
	rng     Rand // in the worker so that passing it to Apply allocates nothing
}

// task is one sample for a worker: where to read it from and where to put it.
type task struct {
	s     *slot
	pos   int
	index int // map source index
	id    int // augmentation seed: index, or stream position
	epoch int
	rec   *Record
}

// epoch is a running pipeline: it produces batches from the epoch and
// step it was started at onwards, running on into the following epochs
// (so that their first batches are ready when the consumer gets there),
// until it fails or is stopped.
type epoch struct {
	ctx    context.Context
	cancel context.CancelFunc
	free   chan *slot
	order  chan *slot
	tasks  chan task
	recs   chan *Record
	wg     sync.WaitGroup
	once   sync.Once
	err    error
}

// fail records the pipeline's first error and stops it. Errors after the
// pipeline was stopped are consequences of the stop (a closed stream, a
// cancelled context), not failures.
func (e *epoch) fail(err error) {
	if e.ctx.Err() != nil {
		return
	}
	e.once.Do(func() { e.err = err })
	e.cancel()
}

// NewLoader makes a loader over a map source. It reads one sample to learn
// the shapes, then allocates the staging buffers.
func NewLoader(src MapSource, cfg Config) (*Loader, error) {
	l := &Loader{cfg: cfg, msrc: src}
	return l, l.init()
}

// NewStreamLoader makes a loader over a stream source. It reads the first
// record to learn the shapes, then allocates the staging buffers.
func NewStreamLoader(src StreamSource, cfg Config) (*Loader, error) {
	l := &Loader{cfg: cfg, ssrc: src}
	return l, l.init()
}

// PlanMemory says what a loader with this source and configuration would
// hold, without allocating its staging buffers.
func PlanMemory(src any, cfg Config) (Memory, error) {
	l := &Loader{cfg: cfg}
	switch s := src.(type) {
	case MapSource:
		l.msrc = s
	case StreamSource:
		l.ssrc = s
	default:
		return Memory{}, fmt.Errorf("dataset: %T is neither a MapSource nor a StreamSource", src)
	}
	if err := l.configure(); err != nil {
		return Memory{}, err
	}
	return l.mem, nil
}

func (l *Loader) configure() error {
	c := &l.cfg
	if c.BatchSize <= 0 {
		return fmt.Errorf("dataset: batch size %d, must be positive", c.BatchSize)
	}
	if c.Workers < 0 || c.Depth < 0 || c.ShuffleBuffer < 0 || c.Start.Epoch < 0 || c.Start.Step < 0 {
		return fmt.Errorf("dataset: negative workers, depth, shuffle buffer or start in %+v", *c)
	}
	c.Workers = max(c.Workers, 1)
	if c.Depth == 0 {
		c.Depth = 2
	}
	if c.Alloc == nil {
		c.Alloc = SliceAlloc
	}
	if c.MaxRecordBytes == 0 {
		c.MaxRecordBytes = DefaultMaxRecordBytes
	}
	if l.ssrc != nil && c.Shuffle && c.ShuffleBuffer == 0 {
		c.ShuffleBuffer = 8 * c.BatchSize
	}
	if l.ssrc != nil && !c.Shuffle {
		c.ShuffleBuffer = 0
	}
	ex, err := l.probe()
	if err != nil {
		return err
	}
	l.in = slices.Clone(ex.Shape)
	l.tok = len(ex.Tokens) > 0
	l.ylen = len(ex.Y)
	if l.tok && len(c.Transforms) > 0 {
		return fmt.Errorf("dataset: transforms given for a token source")
	}
	if l.shape, err = outShape(l.in, c.Transforms); err != nil {
		return err
	}
	l.elems = 1
	for _, d := range l.shape {
		l.elems *= d
	}
	// The largest sample any step of the transform chain holds: of the
	// source's largest sample when it says (images of mixed sizes), else
	// of the one read.
	most, s, raw := len(ex.X), l.in, int64(cap(ex.raw))
	var bound SampleBound
	if b, ok := l.src().(Bounder); ok {
		if bound, err = b.SampleBound(); err != nil {
			return err
		}
	}
	if !l.tok && len(bound.Shape) == len(l.in) && numElems(bound.Shape) > numElems(l.in) {
		s = bound.Shape
		most = numElems(s)
	}
	raw = max(raw, bound.Bytes)
	// mostOut is the largest transform output: the worker's second
	// buffer holds only outputs (sample keeps the larger buffer for the
	// decoder), the first the input and outputs.
	in0, mostOut := s, 0
	for _, t := range c.Transforms {
		s, _ = t.OutShape(s)
		n := numElems(s)
		most, mostOut = max(most, n), max(mostOut, n)
	}
	l.most, l.mostOut = most, mostOut
	in := 4
	if l.tok {
		in = 8
	}
	m := Memory{Depth: c.Depth, Workers: c.Workers}
	m.StagingInputs = int64(c.BatchSize) * int64(l.elems) * int64(in)
	m.StagingTargets = int64(c.BatchSize) * int64(l.ylen) * 8
	m.StagingBuffer = m.StagingInputs + m.StagingTargets
	m.ScratchPerWorker = int64((most+mostOut)*4+8*len(ex.Tokens)+8*l.ylen) + raw
	if len(in0) == 3 && !l.tok {
		m.ScratchPerWorker += int64(in0[1]) * int64(in0[2]) * 4
	}
	if r, ok := l.msrc.(Resident); ok {
		m.Source = r.ResidentBytes()
	}
	if l.msrc != nil {
		m.Shuffle = 8 * int64(l.msrc.Len())
	} else {
		m.Shuffle = int64(l.poolSize()) * int64(c.MaxRecordBytes)
	}
	l.mem = m
	return nil
}

// poolSize is the number of stream records: the shuffle buffer, one batch
// being gathered and Depth batches in flight.
func (l *Loader) poolSize() int {
	return l.cfg.ShuffleBuffer + (l.cfg.Depth+1)*l.cfg.BatchSize
}

// probe reads the first readable sample.
func (l *Loader) probe() (*Example, error) {
	ex := new(Example)
	if l.msrc != nil {
		n := l.msrc.Len()
		if n == 0 {
			return nil, errors.New("dataset: the source is empty")
		}
		var err error
		for i := range min(n, 64) {
			if err = l.msrc.Get(i, ex); err == nil {
				return ex, nil
			}
			if se := (*SampleError)(nil); !l.cfg.SkipBad || !errors.As(err, &se) {
				return nil, err
			}
		}
		return nil, err
	}
	st, err := l.ssrc.Open(context.Background(), 0)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	var r Record
	for range 64 {
		if err = st.Next(context.Background(), &r); err != nil {
			if err == io.EOF {
				return nil, errors.New("dataset: the stream is empty")
			}
			return nil, err
		}
		if err = l.ssrc.Decode(&r, ex); err == nil {
			return ex, nil
		}
		if se := (*SampleError)(nil); !l.cfg.SkipBad || !errors.As(err, &se) {
			return nil, err
		}
	}
	return nil, err
}

func (l *Loader) init() error {
	if err := l.configure(); err != nil {
		return err
	}
	c := &l.cfg
	b := c.BatchSize
	for range c.Depth {
		s := &slot{bad: make([]bool, b), ready: make(chan struct{}, 1)}
		l.slots = append(l.slots, s)
		var err error
		if l.tok {
			s.tok, err = allocView[int64](s, c.Alloc, "tokens", b*l.elems)
		} else {
			s.x, err = allocView[float32](s, c.Alloc, "inputs", b*l.elems)
		}
		if err == nil {
			s.y, err = allocView[int64](s, c.Alloc, "targets", b*l.ylen)
		}
		if err != nil {
			l.freeStaging()
			return fmt.Errorf("dataset: staging buffer: %w", err)
		}
	}
	l.ws = make([]worker, c.Workers)
	for i := range l.ws {
		// Transforms swap the two buffers; sample swaps them back so that
		// the decoder always gets the larger, and the other holds only
		// transform outputs (a 2048x1536 photo resized to 64x64 needs one
		// buffer of the photo's size, not two).
		l.ws[i].ex.X = make([]float32, 0, l.most)
		l.ws[i].scratch = make([]float32, 0, l.mostOut)
	}
	if l.ssrc != nil {
		l.records = make([]*Record, l.poolSize())
		for i := range l.records {
			l.records[i] = new(Record)
		}
	}
	l.state = c.Start
	return nil
}

// allocView allocates n elements of T for a slot, keeping the free
// function.
func allocView[T float32 | int64](s *slot, alloc AllocFunc, what string, n int) ([]T, error) {
	var z T
	buf, free, err := alloc(what, int64(n)*int64(unsafe.Sizeof(z)))
	if err != nil {
		return nil, err
	}
	if free != nil {
		s.frees = append(s.frees, free)
	}
	return view[T](buf, n)
}

// view reinterprets an allocator's bytes as n elements of T.
func view[T float32 | int64](buf []byte, n int) ([]T, error) {
	var z T
	size := int(unsafe.Sizeof(z))
	if len(buf) < n*size {
		return nil, fmt.Errorf("allocator returned %d bytes, %d asked", len(buf), n*size)
	}
	if n == 0 {
		return []T{}, nil
	}
	if uintptr(unsafe.Pointer(unsafe.SliceData(buf)))%unsafe.Alignof(z) != 0 {
		return nil, fmt.Errorf("allocator returned memory not aligned to %d bytes", unsafe.Alignof(z))
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(buf))), n), nil
}

func (l *Loader) freeStaging() {
	for _, s := range l.slots {
		for _, f := range s.frees {
			f()
		}
		s.frees, s.x, s.tok, s.y = nil, nil, nil, nil
	}
}

// Memory is what the loader holds, for the memory plan.
func (l *Loader) Memory() Memory { return l.mem }

// Shape is one example's shape in a batch.
func (l *Loader) Shape() []int { return l.shape }

// State is the position of the next batch Next will deliver; a loader made
// with Config.Start set to it continues exactly where this one is.
func (l *Loader) State() State { return l.state }

// NumBatches is the number of batches per epoch of a map source (Sampler's
// count; fewer are delivered if whole batches are skipped), or -1 for a
// stream.
func (l *Loader) NumBatches() int {
	if l.msrc == nil {
		return -1
	}
	return l.sampler().NumBatches()
}

func (l *Loader) sampler() Sampler {
	return Sampler{N: l.msrc.Len(), BatchSize: l.cfg.BatchSize, Shuffle: l.cfg.Shuffle, Seed: l.cfg.Seed, DropLast: l.cfg.DropLast}
}

// Stats returns the loader's counters.
func (l *Loader) Stats() Stats {
	return Stats{Batches: l.batches, Wait: l.wait, Skipped: l.skipped + l.shards.Load()}
}

// Next returns the next batch of the current epoch, or io.EOF once the
// epoch is over (the call after that starts the next epoch). The batch is
// valid until the next call to Next or Close.
//
// When ctx is done while Next waits, the workers are stopped and ctx's error
// returned; State still names the batch not delivered, and a later Next
// restarts from it. A worker's error (a bad sample without SkipBad, an I/O
// error) stops the loader: Next returns it, now and on every later call.
// Next is not safe for concurrent use.
func (l *Loader) Next(ctx context.Context) (*Batch, error) {
	if l.closed {
		return nil, ErrClosed
	}
	if l.err != nil {
		return nil, l.err
	}
	if l.held != nil {
		l.ep.free <- l.held // never blocks: there are Depth slots
		l.held = nil
	}
	t0 := time.Now()
	defer func() { l.wait += time.Since(t0) }()
	for {
		if l.ep == nil {
			l.start()
		}
		ep := l.ep
		var s *slot
		select {
		case s = <-ep.order:
		case <-ep.ctx.Done():
			return nil, l.stop(nil)
		case <-ctx.Done():
			return nil, l.stop(ctx.Err())
		}
		if s == nil { // order closed: the producer failed
			return nil, l.stop(nil)
		}
		if s == epochEnd {
			l.state = State{Epoch: l.state.Epoch + 1}
			return nil, io.EOF
		}
		select {
		case <-s.ready:
		case <-ep.ctx.Done():
			return nil, l.stop(nil)
		case <-ctx.Done():
			return nil, l.stop(ctx.Err())
		}
		b := l.finish(s)
		l.state.Step = b.Step + 1
		if b.N == 0 { // every sample skipped
			ep.free <- s
			continue
		}
		l.held = s
		l.batches++
		return b, nil
	}
}

// stop tears the epoch down (stopping and waiting for its goroutines). It
// returns the pipeline's failure, which it keeps (the loader is then
// done), or else ctxErr, the consumer's reason to stop (the loader may
// continue from State).
func (l *Loader) stop(ctxErr error) error {
	ep := l.ep
	ep.cancel()
	ep.wg.Wait()
	l.ep = nil
	l.held = nil
	if ep.err != nil {
		l.err = ep.err
		return ep.err
	}
	if ctxErr == nil {
		// Only a failure or the consumer stops a pipeline; never hand
		// back a nil batch without an error.
		return errors.New("dataset: loader pipeline stopped without a cause")
	}
	return ctxErr
}

// finish compacts a filled slot (dropping skipped samples) into its Batch.
func (l *Loader) finish(s *slot) *Batch {
	b := &s.batch
	k := 0
	skipped := 0
	for i := range s.n {
		if s.bad[i] {
			skipped++
			continue
		}
		if k != i {
			if l.tok {
				copy(s.tok[k*l.elems:(k+1)*l.elems], s.tok[i*l.elems:(i+1)*l.elems])
			} else {
				copy(s.x[k*l.elems:(k+1)*l.elems], s.x[i*l.elems:(i+1)*l.elems])
			}
			copy(s.y[k*l.ylen:(k+1)*l.ylen], s.y[i*l.ylen:(i+1)*l.ylen])
		}
		k++
	}
	b.N, b.Skipped, b.Shape = k, skipped, l.shape
	l.skipped += int64(skipped)
	b.X, b.Tokens = nil, nil
	if l.tok {
		b.Tokens = s.tok[:k*l.elems]
	} else {
		b.X = s.x[:k*l.elems]
	}
	b.Y = s.y[:k*l.ylen]
	return b
}

// start launches the pipeline for l.state.
func (l *Loader) start() {
	c := &l.cfg
	ctx, cancel := context.WithCancel(context.Background())
	ep := &epoch{
		ctx:    ctx,
		cancel: cancel,
		free:   make(chan *slot, c.Depth),
		order:  make(chan *slot, c.Depth+1), // the slots and an epochEnd
		tasks:  make(chan task, c.Workers*2),
	}
	for _, s := range l.slots {
		ep.free <- s
	}
	if l.ssrc != nil {
		ep.recs = make(chan *Record, len(l.records))
		for _, r := range l.records {
			ep.recs <- r
		}
	}
	l.ep = ep
	ep.wg.Add(1 + c.Workers)
	go l.produce(ep, l.state.Epoch, l.state.Step)
	for i := range c.Workers {
		go l.work(ep, &l.ws[i])
	}
}

// produce hands out the samples of each batch, in order, as staging
// buffers come free, epoch after epoch from batch from of epoch e.
func (l *Loader) produce(ep *epoch, e, from int) {
	defer ep.wg.Done()
	defer close(ep.tasks)
	defer close(ep.order)
	for ; ; e, from = e+1, 0 {
		var err error
		if l.msrc != nil {
			err = l.produceMap(ep, e, from)
		} else {
			err = l.produceStream(ep, e, from)
		}
		if err != nil {
			ep.fail(err)
			return
		}
		select {
		case ep.order <- epochEnd:
		case <-ep.ctx.Done():
			return
		}
	}
}

// acquire takes a free staging buffer and queues it for the consumer.
func (l *Loader) acquire(ep *epoch, e, step, n int) (*slot, error) {
	var s *slot
	select {
	case s = <-ep.free:
	case <-ep.ctx.Done():
		return nil, ep.ctx.Err()
	}
	s.n = n
	s.batch.Epoch, s.batch.Step = e, step
	clear(s.bad[:n])
	s.pending.Store(int32(n))
	select { // a signal left by an epoch torn down before it was read
	case <-s.ready:
	default:
	}
	select { // blocks only behind epochEnds of empty epochs
	case ep.order <- s:
	case <-ep.ctx.Done():
		return nil, ep.ctx.Err()
	}
	return s, nil
}

func (l *Loader) send(ep *epoch, t task) error {
	select {
	case ep.tasks <- t:
		return nil
	case <-ep.ctx.Done():
		return ep.ctx.Err()
	}
}

func (l *Loader) produceMap(ep *epoch, e, from int) error {
	smp := l.sampler()
	order := smp.Order(e)
	for step := from; step < smp.NumBatches(); step++ {
		lo := step * smp.BatchSize
		idx := order[lo:min(lo+smp.BatchSize, len(order))]
		s, err := l.acquire(ep, e, step, len(idx))
		if err != nil {
			return err
		}
		for pos, i := range idx {
			if err := l.send(ep, task{s: s, pos: pos, index: i, id: i, epoch: e}); err != nil {
				return err
			}
		}
	}
	return nil
}

func (l *Loader) produceStream(ep *epoch, e, from int) error {
	c := &l.cfg
	st, err := l.ssrc.Open(ep.ctx, e)
	if err != nil {
		return err
	}
	// A read blocked on a FIFO or a slow disk returns when the stream is
	// closed, so cancellation is heard.
	closed := make(chan struct{})
	stopClose := context.AfterFunc(ep.ctx, func() { st.Close(); close(closed) })
	defer func() {
		if stopClose() {
			st.Close()
		} else {
			<-closed // no goroutine outlives the epoch
		}
		if sk, ok := st.(interface{ Skipped() int }); ok {
			l.shards.Add(int64(sk.Skipped()))
		}
	}()
	rng := sampleRand(c.Seed, e, -1)
	buf := make([]*Record, 0, c.ShuffleBuffer)
	eof := false
	// next yields the stream's records through the shuffle buffer.
	next := func() (*Record, error) {
		for !eof {
			var r *Record
			select {
			case r = <-ep.recs:
			case <-ep.ctx.Done():
				return nil, ep.ctx.Err()
			}
			if err := st.Next(ep.ctx, r); err != nil {
				ep.recs <- r
				if err != io.EOF {
					return nil, err
				}
				eof = true
				break
			}
			if c.ShuffleBuffer == 0 {
				return r, nil
			}
			if len(buf) < c.ShuffleBuffer {
				buf = append(buf, r)
				continue
			}
			j := rng.Intn(len(buf))
			out := buf[j]
			buf[j] = r
			return out, nil
		}
		if len(buf) == 0 {
			return nil, io.EOF
		}
		j := rng.Intn(len(buf))
		out := buf[j]
		buf[j] = buf[len(buf)-1]
		buf = buf[:len(buf)-1]
		return out, nil
	}
	// Resuming replays the stream up to the first batch wanted, without
	// decoding: the order is a function of the stream and the seed only.
	seq := 0
	for ; seq < from*c.BatchSize; seq++ {
		r, err := next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		ep.recs <- r
	}
	batch := make([]*Record, 0, c.BatchSize)
	for step := from; ; step++ {
		batch = batch[:0]
		for len(batch) < c.BatchSize {
			r, err := next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return err
			}
			batch = append(batch, r)
		}
		if len(batch) == 0 || (c.DropLast && len(batch) < c.BatchSize) {
			for _, r := range batch {
				ep.recs <- r
			}
			return nil
		}
		s, err := l.acquire(ep, e, step, len(batch))
		if err != nil {
			return err
		}
		for pos, r := range batch {
			if err := l.send(ep, task{s: s, pos: pos, id: seq, rec: r, epoch: e}); err != nil {
				return err
			}
			seq++
		}
		if len(batch) < c.BatchSize {
			return nil
		}
	}
}

// work decodes, transforms and collates samples until the tasks run out.
func (l *Loader) work(ep *epoch, w *worker) {
	defer ep.wg.Done()
	for t := range ep.tasks {
		if ep.ctx.Err() != nil {
			continue // drain
		}
		err := l.sample(ep, w, t)
		if err != nil {
			var se *SampleError
			if !l.cfg.SkipBad || !errors.As(err, &se) {
				ep.fail(err)
				continue
			}
			t.s.bad[t.pos] = true
			if l.cfg.OnSkip != nil {
				l.cfg.OnSkip(err)
			}
		}
		if t.s.pending.Add(-1) == 0 {
			t.s.ready <- struct{}{}
		}
	}
}

// sample reads one sample into its place in the staging buffer.
func (l *Loader) sample(ep *epoch, w *worker, t task) error {
	ex := &w.ex
	var err error
	if t.rec != nil {
		err = l.ssrc.Decode(t.rec, ex)
		ep.recs <- t.rec // never blocks: the channel holds the whole pool
	} else {
		if err = l.msrc.Get(t.index, ex); err != nil {
			// (Inside the branch: errors.As's target escapes, and the
			// hot path allocates nothing.)
			var se *SampleError
			if errors.As(err, &se) && se.Index < 0 {
				se.Index = t.index
			}
		}
	}
	if err != nil {
		return err
	}
	if !slices.Equal(ex.Shape, l.in) {
		// A sample of another size than the probed one is fine when the
		// transforms make it the batch's shape (a Resize, a crop).
		if out, err := outShape(ex.Shape, l.cfg.Transforms); err != nil || !slices.Equal(out, l.shape) {
			if err == nil {
				err = fmt.Errorf("%w: %v becomes %v, the batch holds %v", ErrShape, ex.Shape, out, l.shape)
			}
			return l.where(t, err)
		}
	}
	if len(ex.Y) != l.ylen {
		return l.where(t, fmt.Errorf("%w: %d targets, the batch holds %d", ErrShape, len(ex.Y), l.ylen))
	}
	if len(l.cfg.Transforms) > 0 {
		w.rng = sampleRand(l.cfg.Seed, t.epoch, t.id)
		for _, tr := range l.cfg.Transforms {
			tr.Apply(&w.rng, ex, &w.scratch)
		}
	}
	if l.tok {
		copy(t.s.tok[t.pos*l.elems:(t.pos+1)*l.elems], ex.Tokens)
	} else {
		copy(t.s.x[t.pos*l.elems:(t.pos+1)*l.elems], ex.X)
	}
	copy(t.s.y[t.pos*l.ylen:(t.pos+1)*l.ylen], ex.Y)
	if cap(w.scratch) > cap(ex.X) {
		ex.X, w.scratch = w.scratch[:0], ex.X[:0]
	}
	return nil
}

// where wraps err in a SampleError naming the sample.
func (l *Loader) where(t task, err error) error {
	if t.rec != nil {
		return &SampleError{File: t.rec.Source, Member: t.rec.Key, Offset: -1, Index: -1, Err: err}
	}
	name := "sample"
	if n, ok := l.msrc.(Namer); ok {
		name = n.Name(t.index)
	}
	return &SampleError{File: name, Offset: -1, Index: t.index, Err: err}
}

// Close stops the workers and frees the staging buffers. It is safe to call
// more than once.
func (l *Loader) Close() error {
	if l.closed {
		return nil
	}
	if l.ep != nil {
		l.ep.cancel()
		l.ep.wg.Wait()
		l.ep = nil
	}
	l.held = nil
	l.closed = true
	l.freeStaging()
	return nil
}

// src is the loader's source, map or stream.
func (l *Loader) src() any {
	if l.msrc != nil {
		return l.msrc
	}
	return l.ssrc
}

func numElems(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}
