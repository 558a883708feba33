package comm

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Local is a group of ranks in one process, one goroutine each: the
// transport of tests, and of several devices of one machine. Reductions
// add in rank order, so every rank gets bit-identical results and a run
// is reproducible.
type Local struct {
	n      int
	mu     sync.Mutex
	rounds map[uint64]*round
	mail   map[mailKey]chan []float32
	ab     *abortState   // shared with the groups split from this one
	abort  chan struct{} // ab.ch
	comms  []*localComm
}

// abortState is the abort of a Local group and of every group split from
// it: as MPI_Abort ends the whole job, a failure in a subgroup must stop
// ranks waiting in the parent or in a sibling group too.
type abortState struct {
	mu    sync.Mutex
	ch    chan struct{}
	cause error // why the group was aborted, set once before ch closes
}

// round is one collective: the ranks' inputs until the last arrives,
// then the result every rank copies out.
type round struct {
	op      string
	n, root int
	first   int // the rank that opened the round, named in a mismatch
	in32    [][]float32
	in64    [][]float64
	out32   []float32
	out64   []float64
	comms   []Comm // a split's result, by rank of the parent
	arrived int
	left    int // ranks yet to copy the result out
	done    chan struct{}
}

type mailKey struct{ src, dst, tag int }

// NewLocal makes a group of n ranks; Comm(r) is rank r.
func NewLocal(n int) (*Local, error) {
	if n < 1 {
		return nil, fmt.Errorf("%w: a group of %d ranks", ErrArgument, n)
	}
	return newLocal(n, &abortState{ch: make(chan struct{})}), nil
}

func newLocal(n int, ab *abortState) *Local {
	l := &Local{n: n, rounds: map[uint64]*round{}, mail: map[mailKey]chan []float32{}, ab: ab, abort: ab.ch}
	for r := range n {
		l.comms = append(l.comms, &localComm{l: l, rank: r})
	}
	return l
}

// Comm returns rank r's communicator.
func (l *Local) Comm(r int) Comm { return l.comms[r] }

// Abort ends every call in progress and every later one with an error
// wrapping ErrAborted and cause. The first cause is kept.
// Groups split from l, and the group l was split from, are aborted too.
func (l *Local) Abort(cause error) {
	l.ab.mu.Lock()
	defer l.ab.mu.Unlock()
	select {
	case <-l.ab.ch:
	default:
		l.ab.cause = cause
		close(l.ab.ch)
	}
}

func (l *Local) aborted() error {
	l.ab.mu.Lock()
	defer l.ab.mu.Unlock()
	return fmt.Errorf("%w: %w", ErrAborted, l.ab.cause)
}

// Run runs fn on n ranks of a new Local group, one goroutine each, and
// returns their errors joined. A rank that returns an error aborts the
// group (a RankError naming it), so the others stop in their next
// collective instead of waiting for it.
func Run(ctx context.Context, n int, fn func(ctx context.Context, c Comm) error) error {
	l, err := NewLocal(n)
	if err != nil {
		return err
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if p := recover(); p != nil {
					errs[r] = &RankError{Rank: r, Err: fmt.Errorf("panic: %v", p)}
					l.Abort(errs[r])
				}
			}()
			if err := fn(ctx, l.Comm(r)); err != nil {
				var re *RankError
				if !errors.As(err, &re) {
					err = &RankError{Rank: r, Err: err}
				}
				errs[r] = err
				l.Abort(err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

type localComm struct {
	l    *Local
	rank int
	seq  uint64
}

func (c *localComm) Rank() int { return c.rank }
func (c *localComm) Size() int { return c.l.n }

// collective enters round c.seq with this rank's input, waits for every
// rank, and calls out with the round's result.
func (c *localComm) collective(ctx context.Context, op string, n, root int, in32 []float32, in64 []float64, compute func(r *round), out func(r *round)) error {
	l := c.l
	seq := c.seq
	c.seq++
	if err := ctx.Err(); err != nil {
		err := &RankError{Rank: c.rank, Op: op, Err: err}
		l.Abort(err)
		return err
	}
	l.mu.Lock()
	select {
	case <-l.abort:
		l.mu.Unlock()
		return l.aborted()
	default:
	}
	r := l.rounds[seq]
	if r == nil {
		r = &round{op: op, n: n, root: root, first: c.rank, in32: make([][]float32, l.n), in64: make([][]float64, l.n), left: l.n, done: make(chan struct{})}
		l.rounds[seq] = r
	} else if r.op != op || r.n != n || r.root != root {
		err := &RankError{Rank: c.rank, Op: op, Err: fmt.Errorf("%w: collective %d is %s of %d values (root %d) here, %s of %d values (root %d) on rank %d",
			ErrMismatch, seq, op, n, root, r.op, r.n, r.root, r.first)}
		l.Abort(err) // the abort has a lock of its own
		l.mu.Unlock()
		return err
	}
	r.in32[c.rank], r.in64[c.rank] = in32, in64
	r.arrived++
	if r.arrived == l.n {
		compute(r)
		close(r.done)
	}
	l.mu.Unlock()
	select {
	case <-r.done:
	case <-l.abort:
		return l.aborted()
	case <-ctx.Done():
		err := &RankError{Rank: c.rank, Op: op, Err: ctx.Err()}
		l.Abort(err)
		return err
	}
	out(r)
	l.mu.Lock()
	r.left--
	if r.left == 0 {
		delete(l.rounds, seq)
	}
	l.mu.Unlock()
	return nil
}

// sum32 adds the ranks' inputs in rank order.
func sum32(in [][]float32, op Op) []float32 {
	out := make([]float32, len(in[0]))
	copy(out, in[0])
	for _, b := range in[1:] {
		for i, v := range b {
			out[i] += v
		}
	}
	if op == Avg {
		n := float32(len(in))
		for i := range out {
			out[i] /= n
		}
	}
	return out
}

func (c *localComm) AllReduce(ctx context.Context, buf []float32, op Op) error {
	return c.collective(ctx, "all-reduce/"+op.String(), len(buf), 0, buf, nil,
		func(r *round) { r.out32 = sum32(r.in32, op) },
		func(r *round) { copy(buf, r.out32) })
}

func (c *localComm) AllReduce64(ctx context.Context, buf []float64, op Op) error {
	return c.collective(ctx, "all-reduce64/"+op.String(), len(buf), 0, nil, buf,
		func(r *round) {
			out := make([]float64, len(buf))
			for _, b := range r.in64 {
				for i, v := range b {
					out[i] += v
				}
			}
			if op == Avg {
				for i := range out {
					out[i] /= float64(len(r.in64))
				}
			}
			r.out64 = out
		},
		func(r *round) { copy(buf, r.out64) })
}

func (c *localComm) ReduceScatter(ctx context.Context, send, recv []float32, op Op) error {
	if err := checkLens(c, "reduce-scatter", len(send), len(recv)); err != nil {
		return err
	}
	m := len(recv)
	return c.collective(ctx, "reduce-scatter/"+op.String(), len(send), 0, send, nil,
		func(r *round) { r.out32 = sum32(r.in32, op) },
		func(r *round) { copy(recv, r.out32[c.rank*m:(c.rank+1)*m]) })
}

func (c *localComm) AllGather(ctx context.Context, send, recv []float32) error {
	if err := checkLens(c, "all-gather", len(send), len(recv)); err != nil {
		return err
	}
	return c.collective(ctx, "all-gather", len(send), 0, send, nil,
		func(r *round) {
			// Inputs are read here, before any rank writes its recv:
			// send may be a block of recv.
			out := make([]float32, 0, len(send)*len(r.in32))
			for _, b := range r.in32 {
				out = append(out, b...)
			}
			r.out32 = out
		},
		func(r *round) { copy(recv, r.out32) })
}

func (c *localComm) Broadcast(ctx context.Context, buf []float32, root int) error {
	if err := checkRank(c, "root", root); err != nil {
		return err
	}
	return c.collective(ctx, "broadcast", len(buf), root, buf, nil,
		func(r *round) { r.out32 = append([]float32(nil), r.in32[root]...) },
		func(r *round) { copy(buf, r.out32) })
}

func (c *localComm) Barrier(ctx context.Context) error {
	return c.collective(ctx, "barrier", 0, 0, nil, nil, func(*round) {}, func(*round) {})
}

// mailbox is the channel of messages from src to dst with tag.
func (l *Local) mailbox(k mailKey) chan []float32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	ch := l.mail[k]
	if ch == nil {
		ch = make(chan []float32, 64)
		l.mail[k] = ch
	}
	return ch
}

func (c *localComm) Send(ctx context.Context, buf []float32, dst, tag int) error {
	if err := checkRank(c, "destination", dst); err != nil {
		return err
	}
	msg := append([]float32(nil), buf...)
	select {
	case c.l.mailbox(mailKey{c.rank, dst, tag}) <- msg:
		return nil
	case <-c.l.abort:
		return c.l.aborted()
	case <-ctx.Done():
		err := &RankError{Rank: c.rank, Op: fmt.Sprintf("send to rank %d", dst), Err: ctx.Err()}
		c.l.Abort(err)
		return err
	}
}

func (c *localComm) Recv(ctx context.Context, buf []float32, src, tag int) error {
	if err := checkRank(c, "source", src); err != nil {
		return err
	}
	op := fmt.Sprintf("receive from rank %d", src)
	select {
	case msg := <-c.l.mailbox(mailKey{src, c.rank, tag}):
		if len(msg) != len(buf) {
			err := &RankError{Rank: c.rank, Op: op, Err: fmt.Errorf("%w: a message of %d values, %d expected (tag %d)", ErrMismatch, len(msg), len(buf), tag)}
			c.l.Abort(err)
			return err
		}
		copy(buf, msg)
		return nil
	case <-c.l.abort:
		return c.l.aborted()
	case <-ctx.Done():
		err := &RankError{Rank: c.rank, Op: op, Err: ctx.Err()}
		c.l.Abort(err)
		return err
	}
}
