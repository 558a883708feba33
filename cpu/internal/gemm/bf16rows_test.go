package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/headroom-ml/headroom/internal/parallel"
)

// SgemmMixedRows gives SgemmMixed's C bit for bit, and where it reports
// true it called rows for disjoint ranges covering [0, m), each after its
// rows were final (a copy taken in the callback matches the finished C);
// where it reports false it called rows for none. The shapes include
// several K blocks, edge tiles, a C wider than one column block and
// products too small to split by rows among two threads.
func TestSgemmMixedRows(t *testing.T) {
	if bf16Kern == nil {
		t.Skip("no native bf16 kernel")
	}
	defer useBF16Kern(bf16TileKern())() // VDPBF16PS's arithmetic (AMX: amx_test.go)
	for _, s := range []struct {
		m, n, k    int
		tA, tB     bool
		wantCalled bool // with 2 threads
	}{
		{2048, 384, 1536, false, false, true},
		{300, 1152, 384, false, true, true},
		{77, 50, 1100, true, false, true},
		{96, 400, 1100, true, false, false},  // split by columns (n >= 4m)
		{24, 100, 4096, false, false, false}, // one M block, split by columns
		{24, 16, 64, false, false, true},     // one M block and one panel
		{50, bf16NC + 40, 48, false, true, false},
	} {
		for _, threads := range []int{1, 2} {
			t.Run(fmt.Sprintf("%dx%dx%d_tA%v_tB%v/t%d", s.m, s.n, s.k, s.tA, s.tB, threads), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(7, 8))
				a, b := randBF16s(rng, s.m*s.k, false), randBF16s(rng, s.k*s.n, false)
				lda, ldb := s.k, s.n
				if s.tA {
					lda = s.m
				}
				if s.tB {
					ldb = s.k
				}
				pool := parallel.NewPool(threads)
				defer pool.Close()
				want := make([]float32, s.m*s.n)
				SgemmMixed(s.tA, s.tB, s.m, s.n, s.k, 1, BF16(a), lda, BF16(b), ldb, 0, want, s.n, pool)
				got := make([]float32, s.m*s.n)
				seen := make([]float32, s.m*s.n)
				count := make([]int, s.m)
				var mu sync.Mutex
				called := SgemmMixedRows(s.tA, s.tB, s.m, s.n, s.k, 1, BF16(a), lda, BF16(b), ldb, 0, got, s.n, pool, func(i0, i1 int) {
					mu.Lock()
					defer mu.Unlock()
					copy(seen[i0*s.n:i1*s.n], got[i0*s.n:i1*s.n])
					for i := i0; i < i1; i++ {
						count[i]++
					}
				})
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("C[%d] = %v, want %v", i, got[i], want[i])
					}
				}
				if threads == 2 && called != s.wantCalled {
					t.Fatalf("reported %v, want %v", called, s.wantCalled)
				}
				for i, c := range count {
					if called && c != 1 || !called && c != 0 {
						t.Fatalf("row %d passed %d times (reported %v)", i, c, called)
					}
				}
				if !called {
					return
				}
				for i := range want {
					if math.Float32bits(seen[i]) != math.Float32bits(want[i]) {
						t.Fatalf("C[%d] was %v when its rows were passed, finally %v", i, seen[i], want[i])
					}
				}
			})
		}
	}
}
