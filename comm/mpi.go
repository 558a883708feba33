//go:build mpi

package comm

/*
#cgo pkg-config: ompi-c
#include <mpi.h>
#include <stdlib.h>

// Open MPI's handles are macros over addresses of its globals, which cgo
// cannot name: these return them.
static MPI_Datatype hr_float(void) { return MPI_FLOAT; }
static MPI_Datatype hr_double(void) { return MPI_DOUBLE; }
static MPI_Op hr_sum(void) { return MPI_SUM; }
static MPI_Comm hr_world(void) { return MPI_COMM_WORLD; }
static MPI_Comm hr_comm_null(void) { return MPI_COMM_NULL; }
static int hr_undefined(void) { return MPI_UNDEFINED; }
// MPI_IN_PLACE is (void *)1 in Open MPI: never let it reach Go, where a
// pointer-typed stack slot holding 1 is fatal when the stack is copied
// ("invalid pointer found on stack"); these substitute it in C.
static int hr_iallreduce_in_place(void *buf, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c, MPI_Request *r) {
	return MPI_Iallreduce(MPI_IN_PLACE, buf, n, t, op, c, r);
}
static int hr_iallgather(void *send, int in_place, int m, MPI_Datatype t, void *recv, MPI_Comm c, MPI_Request *r) {
	return MPI_Iallgather(in_place ? MPI_IN_PLACE : send, m, t, recv, m, t, c, r);
}
static MPI_Request hr_null_request(void) { return MPI_REQUEST_NULL; }

static int hr_init(int *provided) {
	int done = 0;
	MPI_Initialized(&done);
	if (done) { MPI_Query_thread(provided); return MPI_SUCCESS; }
	return MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, provided);
}
static int hr_thread_serialized(void) { return MPI_THREAD_SERIALIZED; }
static int hr_test(MPI_Request *r, int *flag) { return MPI_Test(r, flag, MPI_STATUS_IGNORE); }
static int hr_errors_return(void) { return MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN); }
*/
import "C"

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"
	"unsafe"
)

// MPIAvailable reports whether this build has the MPI transport.
const MPIAvailable = true

// mpiComm is MPI_COMM_WORLD or a communicator split from it. Calls are
// serialized by one mutex for all of them (MPI_THREAD_SERIALIZED:
// goroutines move between threads, so MPI may be entered from any thread,
// never from two at once). Every operation is
// started non-blocking and polled, so that a cancelled context is seen
// while waiting; MPI cannot cancel a collective, so the caller must then
// abort the job (Abort: every rank stops) instead of leaving the
// others waiting.
type mpiComm struct {
	st         *mpiState
	h          C.MPI_Comm
	rank, size int
	world      bool // MPI_COMM_WORLD: Close finalizes MPI
	freed      bool // a split communicator after Close
}

// mpiState is what the world and its split communicators share.
type mpiState struct {
	mu         sync.Mutex
	rank, size int // in the world: Abort names the rank in the job
	closed     bool
}

var (
	mpiOnce  sync.Once
	mpiWorld *mpiComm
	mpiErr   error
)

func openMPI(rank, size int) (Comm, error) {
	mpiOnce.Do(func() {
		var provided C.int
		if rc := C.hr_init(&provided); rc != C.MPI_SUCCESS {
			mpiErr = fmt.Errorf("comm: MPI_Init_thread failed (code %d)", int(rc))
			return
		}
		if provided < C.hr_thread_serialized() {
			mpiErr = fmt.Errorf("comm: MPI provides thread level %d, below MPI_THREAD_SERIALIZED", int(provided))
			return
		}
		C.hr_errors_return()
		var r, s C.int
		C.MPI_Comm_rank(C.hr_world(), &r)
		C.MPI_Comm_size(C.hr_world(), &s)
		mpiWorld = &mpiComm{st: &mpiState{rank: int(r), size: int(s)}, h: C.hr_world(), rank: int(r), size: int(s), world: true}
		if int(r) != rank || int(s) != size {
			mpiErr = fmt.Errorf("comm: MPI says rank %d of %d, the launcher's environment rank %d of %d", int(r), int(s), rank, size)
		}
	})
	if mpiErr != nil {
		return nil, mpiErr
	}
	return mpiWorld, nil
}

func (c *mpiComm) Rank() int { return c.rank }
func (c *mpiComm) Size() int { return c.size }

func ptr32(b []float32) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

func ptr64(b []float64) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

// run starts an operation and polls it to completion. Buffers are pinned
// while MPI holds their addresses (device memory is outside the Go heap,
// where pinning does nothing).
func (c *mpiComm) run(ctx context.Context, op string, bufs []unsafe.Pointer, start func(req *C.MPI_Request) C.int) error {
	var pin runtime.Pinner
	defer pin.Unpin()
	for _, b := range bufs {
		if b != nil {
			pin.Pin(b)
		}
	}
	req := (*C.MPI_Request)(C.malloc(C.size_t(unsafe.Sizeof(C.MPI_Request(nil)))))
	defer C.free(unsafe.Pointer(req))
	*req = C.hr_null_request()
	c.st.mu.Lock()
	if c.st.closed {
		c.st.mu.Unlock()
		return &RankError{Rank: c.rank, Op: op, Err: fmt.Errorf("%w: closed", ErrAborted)}
	}
	rc := start(req)
	c.st.mu.Unlock()
	if rc != C.MPI_SUCCESS {
		return &RankError{Rank: c.rank, Op: op, Err: fmt.Errorf("MPI error %d", int(rc))}
	}
	wait := time.Microsecond
	for {
		var flag C.int
		c.st.mu.Lock()
		rc = C.hr_test(req, &flag)
		c.st.mu.Unlock()
		if rc != C.MPI_SUCCESS {
			return &RankError{Rank: c.rank, Op: op, Err: fmt.Errorf("MPI error %d", int(rc))}
		}
		if flag != 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			// The operation cannot be cancelled: the caller must end the
			// job (Abort) or the other ranks wait in it.
			return &RankError{Rank: c.rank, Op: op, Err: ctx.Err()}
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Millisecond)
	}
}

func (c *mpiComm) AllReduce(ctx context.Context, buf []float32, op Op) error {
	err := c.run(ctx, "all-reduce", []unsafe.Pointer{ptr32(buf)}, func(req *C.MPI_Request) C.int {
		return C.hr_iallreduce_in_place(ptr32(buf), C.int(len(buf)), C.hr_float(), C.hr_sum(), c.h, req)
	})
	if err == nil && op == Avg {
		n := float32(c.size)
		for i := range buf {
			buf[i] /= n
		}
	}
	return err
}

func (c *mpiComm) AllReduce64(ctx context.Context, buf []float64, op Op) error {
	err := c.run(ctx, "all-reduce", []unsafe.Pointer{ptr64(buf)}, func(req *C.MPI_Request) C.int {
		return C.hr_iallreduce_in_place(ptr64(buf), C.int(len(buf)), C.hr_double(), C.hr_sum(), c.h, req)
	})
	if err == nil && op == Avg {
		for i := range buf {
			buf[i] /= float64(c.size)
		}
	}
	return err
}

func (c *mpiComm) ReduceScatter(ctx context.Context, send, recv []float32, op Op) error {
	if err := checkLens(c, "reduce-scatter", len(send), len(recv)); err != nil {
		return err
	}
	err := c.run(ctx, "reduce-scatter", []unsafe.Pointer{ptr32(send), ptr32(recv)}, func(req *C.MPI_Request) C.int {
		return C.MPI_Ireduce_scatter_block(ptr32(send), ptr32(recv), C.int(len(recv)), C.hr_float(), C.hr_sum(), c.h, req)
	})
	if err == nil && op == Avg {
		n := float32(c.size)
		for i := range recv {
			recv[i] /= n
		}
	}
	return err
}

func (c *mpiComm) AllGather(ctx context.Context, send, recv []float32) error {
	if err := checkLens(c, "all-gather", len(send), len(recv)); err != nil {
		return err
	}
	m := len(send)
	inPlace := C.int(0)
	if m > 0 && ptr32(send) == unsafe.Pointer(&recv[c.rank*m]) {
		inPlace = 1
	}
	return c.run(ctx, "all-gather", []unsafe.Pointer{ptr32(send), ptr32(recv)}, func(req *C.MPI_Request) C.int {
		return C.hr_iallgather(ptr32(send), inPlace, C.int(m), C.hr_float(), ptr32(recv), c.h, req)
	})
}

func (c *mpiComm) Broadcast(ctx context.Context, buf []float32, root int) error {
	if err := checkRank(c, "root", root); err != nil {
		return err
	}
	return c.run(ctx, "broadcast", []unsafe.Pointer{ptr32(buf)}, func(req *C.MPI_Request) C.int {
		return C.MPI_Ibcast(ptr32(buf), C.int(len(buf)), C.hr_float(), C.int(root), c.h, req)
	})
}

func (c *mpiComm) Barrier(ctx context.Context) error {
	return c.run(ctx, "barrier", nil, func(req *C.MPI_Request) C.int {
		return C.MPI_Ibarrier(c.h, req)
	})
}

func (c *mpiComm) Send(ctx context.Context, buf []float32, dst, tag int) error {
	if err := checkRank(c, "destination", dst); err != nil {
		return err
	}
	return c.run(ctx, fmt.Sprintf("send to rank %d", dst), []unsafe.Pointer{ptr32(buf)}, func(req *C.MPI_Request) C.int {
		return C.MPI_Isend(ptr32(buf), C.int(len(buf)), C.hr_float(), C.int(dst), C.int(tag), c.h, req)
	})
}

func (c *mpiComm) Recv(ctx context.Context, buf []float32, src, tag int) error {
	if err := checkRank(c, "source", src); err != nil {
		return err
	}
	return c.run(ctx, fmt.Sprintf("receive from rank %d", src), []unsafe.Pointer{ptr32(buf)}, func(req *C.MPI_Request) C.int {
		return C.MPI_Irecv(ptr32(buf), C.int(len(buf)), C.hr_float(), C.int(src), C.int(tag), c.h, req)
	})
}

// Close finalizes MPI (the world) or frees a split communicator; later
// calls fail.
func (c *mpiComm) Close() error {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	if c.st.closed || c.freed {
		return nil
	}
	if !c.world {
		// A split communicator is freed; MPI stays up for the others.
		c.freed = true
		h := c.h
		if rc := C.MPI_Comm_free(&h); rc != C.MPI_SUCCESS {
			return fmt.Errorf("comm: MPI_Comm_free failed (code %d)", int(rc))
		}
		return nil
	}
	c.st.closed = true
	if rc := C.MPI_Finalize(); rc != C.MPI_SUCCESS {
		return fmt.Errorf("comm: MPI_Finalize failed (code %d)", int(rc))
	}
	return nil
}

// Abort ends the whole job: MPI cannot cancel a collective that other
// ranks wait in, so the job stops with this rank's error on stderr.
func (c *mpiComm) Abort(err error) {
	fmt.Fprintf(os.Stderr, "headroom: rank %d of %d aborts the job: %v\n", c.st.rank, c.st.size, err)
	C.MPI_Abort(C.hr_world(), 1)
}

// Split is MPI_Comm_split. MPI has no non-blocking form, so the context
// is checked on entry only: a rank that never joins stops the job through
// mpirun (it dies) or through Abort (its own failure), as in collectives.
func (c *mpiComm) Split(ctx context.Context, color, key int) (Comm, error) {
	if err := ctx.Err(); err != nil {
		return nil, &RankError{Rank: c.rank, Op: "split", Err: err}
	}
	cc := C.int(color)
	if color < 0 {
		cc = C.hr_undefined()
	}
	h := C.hr_comm_null()
	var r, s C.int
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	if c.st.closed || c.freed {
		return nil, &RankError{Rank: c.rank, Op: "split", Err: fmt.Errorf("%w: closed", ErrAborted)}
	}
	if rc := C.MPI_Comm_split(c.h, cc, C.int(key), &h); rc != C.MPI_SUCCESS {
		return nil, &RankError{Rank: c.rank, Op: "split", Err: fmt.Errorf("MPI error %d", int(rc))}
	}
	if color < 0 {
		return nil, nil
	}
	C.MPI_Comm_rank(h, &r)
	C.MPI_Comm_size(h, &s)
	return &mpiComm{st: c.st, h: h, rank: int(r), size: int(s)}, nil
}
