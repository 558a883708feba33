package comm_test

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/headroom-ml/headroom/comm"
)

// exercise runs every collective on c and checks the results; the same
// code checks Local (in this process) and MPI (under mpirun).
func exercise(ctx context.Context, c comm.Comm) error {
	r, n := c.Rank(), c.Size()
	fr := float32(r)
	// All-reduce: rank r contributes r+1 and 10*r at two places.
	buf := []float32{fr + 1, 10 * fr, 0.5}
	if err := c.AllReduce(ctx, buf, comm.Sum); err != nil {
		return err
	}
	tri := float32(n * (n + 1) / 2)
	if want := []float32{tri, 10 * float32(n*(n-1)/2), 0.5 * float32(n)}; !slices.Equal(buf, want) {
		return fmt.Errorf("all-reduce sum = %v, want %v", buf, want)
	}
	avg := []float32{fr}
	if err := c.AllReduce(ctx, avg, comm.Avg); err != nil {
		return err
	}
	if want := float32(n-1) / 2; avg[0] != want {
		return fmt.Errorf("all-reduce avg = %v, want %v", avg[0], want)
	}
	d := []float64{1e-12 * float64(r+1)}
	if err := c.AllReduce64(ctx, d, comm.Sum); err != nil {
		return err
	}
	if want := 1e-12 * float64(n*(n+1)/2); d[0] < want*(1-1e-12) || d[0] > want*(1+1e-12) {
		return fmt.Errorf("all-reduce64 = %v, want %v", d[0], want)
	}
	// Reduce-scatter: rank r sends value r*100+i at index i.
	const m = 3
	send := make([]float32, n*m)
	for i := range send {
		send[i] = fr*100 + float32(i)
	}
	recv := make([]float32, m)
	if err := c.ReduceScatter(ctx, send, recv, comm.Sum); err != nil {
		return err
	}
	for j := range recv {
		i := r*m + j
		if want := 100*float32(n*(n-1)/2) + float32(n*i); recv[j] != want {
			return fmt.Errorf("reduce-scatter[%d] = %v, want %v", j, recv[j], want)
		}
	}
	// All-gather, separate buffers and in place.
	all := make([]float32, n*2)
	if err := c.AllGather(ctx, []float32{fr, -fr}, all); err != nil {
		return err
	}
	in := make([]float32, n*2)
	in[2*r], in[2*r+1] = fr, -fr
	if err := c.AllGather(ctx, in[2*r:2*r+2], in); err != nil {
		return err
	}
	for k := range n {
		if all[2*k] != float32(k) || all[2*k+1] != -float32(k) || in[2*k] != float32(k) || in[2*k+1] != -float32(k) {
			return fmt.Errorf("all-gather = %v, in place %v", all, in)
		}
	}
	// Broadcast from the last rank.
	b := []float32{fr, fr}
	if err := c.Broadcast(ctx, b, n-1); err != nil {
		return err
	}
	if b[0] != float32(n-1) || b[1] != float32(n-1) {
		return fmt.Errorf("broadcast = %v, want %d", b, n-1)
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	// A ring of messages: each rank sends to the next.
	if n > 1 {
		next, prev := (r+1)%n, (r+n-1)%n
		if err := c.Send(ctx, []float32{fr, 7}, next, 3); err != nil {
			return err
		}
		got := make([]float32, 2)
		if err := c.Recv(ctx, got, prev, 3); err != nil {
			return err
		}
		if got[0] != float32(prev) || got[1] != 7 {
			return fmt.Errorf("received %v from rank %d", got, prev)
		}
	}
	// Bad arguments are refused before anything is sent.
	if err := c.ReduceScatter(ctx, make([]float32, n*m+1), recv, comm.Sum); !errors.Is(err, comm.ErrArgument) {
		return fmt.Errorf("reduce-scatter of a bad length: %v", err)
	}
	if err := c.Broadcast(ctx, b, n); !errors.Is(err, comm.ErrArgument) {
		return fmt.Errorf("broadcast from rank %d of %d: %v", n, n, err)
	}
	return c.Barrier(ctx)
}
