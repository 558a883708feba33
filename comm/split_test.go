package comm_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/comm"
)

// splitCase is one MPI_Comm_split: every rank's color and key, and the
// rank and size each gets (rank -1: no group, a nil communicator).
type splitCase struct {
	name       string
	color, key []int
	rank, size []int
}

var splitCases = []splitCase{
	{"one group", []int{0, 0, 0, 0}, []int{0, 0, 0, 0}, []int{0, 1, 2, 3}, []int{4, 4, 4, 4}},
	{"halves by key descending", []int{0, 1, 0, 1}, []int{0, -1, -2, -3}, []int{1, 1, 0, 0}, []int{2, 2, 2, 2}},
	{"equal keys keep the old order", []int{5, 5, 5, 5}, []int{1, 0, 1, 0}, []int{2, 0, 3, 1}, []int{4, 4, 4, 4}},
	{"blocks", []int{0, 0, 1, 1}, []int{0, 1, 0, 1}, []int{0, 1, 0, 1}, []int{2, 2, 2, 2}},
	{"one alone, one out", []int{-1, 7, 3, 3}, []int{0, 0, 9, 2}, []int{-1, 0, 1, 0}, []int{0, 1, 2, 2}},
	{"three ranks, one out", []int{2, -1, 2}, []int{0, 0, 0}, []int{0, -1, 1}, []int{2, 0, 2}},
	{"three ranks, uneven", []int{0, 1, 0}, []int{3, 0, 1}, []int{1, 0, 0}, []int{2, 1, 2}},
}

// checkSplit splits c as tc says and checks the rank and size each rank
// gets, that a sum over the new group adds exactly its members' old ranks,
// and that every collective works inside it (exercise) while the other
// groups run theirs.
func checkSplit(ctx context.Context, c comm.Comm, tc splitCase) error {
	r := c.Rank()
	sub, err := comm.Split(ctx, c, tc.color[r], tc.key[r])
	if err != nil {
		return err
	}
	if tc.rank[r] < 0 {
		if sub != nil {
			return fmt.Errorf("%s: rank %d with color %d got %v, want none", tc.name, r, tc.color[r], sub)
		}
		return c.Barrier(ctx)
	}
	if sub == nil || sub.Rank() != tc.rank[r] || sub.Size() != tc.size[r] {
		return fmt.Errorf("%s: rank %d got %v, want rank %d of %d", tc.name, r, sub, tc.rank[r], tc.size[r])
	}
	buf := []float32{float32(r)}
	if err := sub.AllReduce(ctx, buf, comm.Sum); err != nil {
		return err
	}
	want := 0
	for q, col := range tc.color {
		if col == tc.color[r] {
			want += q
		}
	}
	if buf[0] != float32(want) {
		return fmt.Errorf("%s: rank %d: sum over its group %v, want %d", tc.name, r, buf[0], want)
	}
	if err := exercise(ctx, sub); err != nil {
		return fmt.Errorf("%s: rank %d (rank %d of %d in its group): %w", tc.name, r, sub.Rank(), sub.Size(), err)
	}
	// The parent still works after the split.
	return c.Barrier(ctx)
}

// exerciseSplits runs every case of as many ranks as c's group.
func exerciseSplits(ctx context.Context, c comm.Comm) error {
	for _, tc := range splitCases {
		if len(tc.color) == c.Size() {
			if err := checkSplit(ctx, c, tc); err != nil {
				return err
			}
		}
	}
	return nil
}

func TestLocalSplit(t *testing.T) {
	for _, tc := range splitCases {
		t.Run(tc.name, func(t *testing.T) {
			if err := comm.Run(context.Background(), len(tc.color), func(ctx context.Context, c comm.Comm) error {
				return checkSplit(ctx, c, tc)
			}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Meta computes the same groups from the layout alone, every rank on its
// own; Split by color alone is refused, as Meta cannot see the others'.
func TestMetaSplitBy(t *testing.T) {
	ctx := context.Background()
	for _, tc := range splitCases {
		n := len(tc.color)
		for r := range n {
			c, err := comm.Meta(r, n)
			if err != nil {
				t.Fatal(err)
			}
			sub, err := comm.SplitBy(ctx, c, func(q int) (int, int) { return tc.color[q], tc.key[q] })
			if err != nil {
				t.Fatal(err)
			}
			if tc.rank[r] < 0 {
				if sub != nil {
					t.Errorf("%s: rank %d got %v, want none", tc.name, r, sub)
				}
				continue
			}
			if sub == nil || sub.Rank() != tc.rank[r] || sub.Size() != tc.size[r] {
				t.Errorf("%s: rank %d got %v, want rank %d of %d", tc.name, r, sub, tc.rank[r], tc.size[r])
			}
		}
	}
	c, _ := comm.Meta(0, 2)
	if _, err := comm.Split(ctx, c, 0, 0); !errors.Is(err, comm.ErrArgument) || !strings.Contains(err.Error(), "SplitBy") {
		t.Errorf("Split on Meta: %v", err)
	}
}

// Grid gives blocks of consecutive ranks and the groups across them, for
// Local and Meta alike; a size that does not divide is refused.
func TestGrid(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ n, inner int }{{4, 2}, {6, 3}, {6, 2}, {3, 1}, {3, 3}} {
		check := func(r int, block, across comm.Comm) error {
			if block.Rank() != r%tc.inner || block.Size() != tc.inner || across.Rank() != r/tc.inner || across.Size() != tc.n/tc.inner {
				return fmt.Errorf("%d ranks in blocks of %d: rank %d got block rank %d of %d, across %d of %d",
					tc.n, tc.inner, r, block.Rank(), block.Size(), across.Rank(), across.Size())
			}
			return nil
		}
		err := comm.Run(ctx, tc.n, func(ctx context.Context, c comm.Comm) error {
			block, across, err := comm.Grid(ctx, c, tc.inner)
			if err != nil {
				return err
			}
			if err := check(c.Rank(), block, across); err != nil {
				return err
			}
			// A block sums its members, the group across sums its own.
			b, a := []float32{float32(c.Rank())}, []float32{float32(c.Rank())}
			if err := block.AllReduce(ctx, b, comm.Sum); err != nil {
				return err
			}
			if err := across.AllReduce(ctx, a, comm.Sum); err != nil {
				return err
			}
			first, col := c.Rank()/tc.inner*tc.inner, c.Rank()%tc.inner
			wb, wa := 0, 0
			for i := range tc.inner {
				wb += first + i
			}
			for j := range tc.n / tc.inner {
				wa += j*tc.inner + col
			}
			if b[0] != float32(wb) || a[0] != float32(wa) {
				return fmt.Errorf("rank %d: block sum %v want %d, across sum %v want %d", c.Rank(), b[0], wb, a[0], wa)
			}
			return nil
		})
		if err != nil {
			t.Error(err)
		}
		for r := range tc.n {
			m, _ := comm.Meta(r, tc.n)
			block, across, err := comm.Grid(ctx, m, tc.inner)
			if err != nil {
				t.Fatal(err)
			}
			if err := check(r, block, across); err != nil {
				t.Errorf("meta: %v", err)
			}
		}
	}
	m, _ := comm.Meta(0, 6)
	if _, _, err := comm.Grid(ctx, m, 4); !errors.Is(err, comm.ErrArgument) {
		t.Errorf("Grid of 6 ranks in blocks of 4: %v", err)
	}
}

// A rank failing after a split stops the ranks waiting in its subgroup,
// in a sibling group and in the parent: nothing waits forever.
func TestLocalSplitAbort(t *testing.T) {
	boom := errors.New("out of memory")
	err := comm.Run(context.Background(), 4, func(ctx context.Context, c comm.Comm) error {
		block, across, err := comm.Grid(ctx, c, 2)
		if err != nil {
			return err
		}
		switch c.Rank() {
		case 3:
			return boom
		case 1: // across {1, 3}: waits for rank 3
			return across.AllReduce(ctx, make([]float32, 1), comm.Sum)
		case 2: // block {2, 3}
			return block.Barrier(ctx)
		}
		return c.Barrier(ctx)
	})
	if !errors.Is(err, boom) || !errors.Is(err, comm.ErrAborted) || !strings.Contains(err.Error(), "rank 3") {
		t.Fatalf("err = %v, want rank 3's failure and the others aborted", err)
	}
	// Ranks 0, 1 and 2 each end aborted.
	if n := strings.Count(err.Error(), comm.ErrAborted.Error()); n != 3 {
		t.Errorf("err = %v, want 3 ranks aborted, got %d", err, n)
	}
}

// Ranks that disagree on a split get a mismatch, as in a collective.
func TestLocalSplitMismatch(t *testing.T) {
	err := comm.Run(context.Background(), 2, func(ctx context.Context, c comm.Comm) error {
		if c.Rank() == 0 {
			_, err := comm.Split(ctx, c, 0, 0)
			return err
		}
		return c.Barrier(ctx)
	})
	if !errors.Is(err, comm.ErrMismatch) {
		t.Fatalf("err = %v, want a mismatch", err)
	}
}
