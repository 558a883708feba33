package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/prim"
)

// The column sums (a bias gradient's reduction over leading axes) are,
// bit for bit, each column's rows added in order in float64 and rounded
// once, for any shape, thread count and column range.
func TestReduceColsMatchesRowOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, sh := range [][2]int{{1, 1}, {3, 7}, {129, 8}, {300, 17}, {2048, 1536}, {257, 600}} {
		rows, cols := sh[0], sh[1]
		x := make([]float32, rows*cols)
		for i := range x {
			x[i] = float32(rng.NormFloat64() * math.Exp(rng.NormFloat64()*4))
		}
		want := make([]float32, cols)
		for c := range cols {
			var s float64
			for r := range rows {
				s += float64(x[r*cols+c])
			}
			want[c] = float32(s)
		}
		for _, threads := range []int{1, 2, 3} {
			pool := parallel.NewPool(threads)
			got := make([]float32, cols)
			reduceCols(pool, prim.SumKind, x, got, rows, cols)
			pool.Close()
			for c := range got {
				if math.Float32bits(got[c]) != math.Float32bits(want[c]) {
					t.Fatalf("%dx%d, %d threads: column %d = %g, want %g", rows, cols, threads, c, got[c], want[c])
				}
			}
		}
	}
}

func BenchmarkReduceCols(b *testing.B) {
	rows, cols := 2048, 1536
	x := make([]float32, rows*cols)
	for i := range x {
		x[i] = float32(i%97) * 0.25
	}
	y := make([]float32, cols)
	pool := parallel.NewPool(1)
	defer pool.Close()
	for b.Loop() {
		reduceCols(pool, prim.SumKind, x, y, rows, cols)
	}
	b.SetBytes(int64(4 * rows * cols))
}
