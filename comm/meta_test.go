package comm_test

import (
	"context"
	"errors"
	"testing"

	"github.com/headroom-ml/headroom/comm"
)

// Meta's collectives move nothing, check their arguments as the others
// do, and never wait.
func TestMeta(t *testing.T) {
	ctx := context.Background()
	c, err := comm.Meta(3, 1024)
	if err != nil || c.Rank() != 3 || c.Size() != 1024 {
		t.Fatalf("Meta(3, 1024) = %v, %v", c, err)
	}
	buf := []float32{1, 2}
	if err := c.AllReduce(ctx, buf, comm.Sum); err != nil || buf[0] != 1 || buf[1] != 2 {
		t.Errorf("AllReduce: %v, %v", buf, err)
	}
	if err := c.Broadcast(ctx, buf, 0); err != nil {
		t.Error(err)
	}
	if err := c.ReduceScatter(ctx, make([]float32, 2048), make([]float32, 2), comm.Sum); err != nil {
		t.Error(err)
	}
	for name, err := range map[string]error{
		"reduce-scatter": c.ReduceScatter(ctx, make([]float32, 3), make([]float32, 1), comm.Sum),
		"all-gather":     c.AllGather(ctx, make([]float32, 1), make([]float32, 3)),
		"broadcast":      c.Broadcast(ctx, buf, 1024),
		"send":           c.Send(ctx, buf, -1, 0),
	} {
		if !errors.Is(err, comm.ErrArgument) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := c.Barrier(cctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Barrier after cancel: %v", err)
	}
	for _, bad := range [][2]int{{0, 0}, {2, 2}, {-1, 4}} {
		if _, err := comm.Meta(bad[0], bad[1]); !errors.Is(err, comm.ErrArgument) {
			t.Errorf("Meta(%d, %d): %v", bad[0], bad[1], err)
		}
	}
}
