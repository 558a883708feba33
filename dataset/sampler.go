package dataset

import (
	"fmt"
	"iter"
	"math/bits"
)

// Sampler splits the examples 0..N-1 into batches of indices, one epoch at a
// time, in file order or shuffled.
//
// The order of an epoch depends only on Seed and the epoch number, not on
// earlier epochs, so a run resumed at epoch e sees exactly the batches it
// would have seen, and the same seed gives the same order on every platform
// and Go release (the generator is implemented here, not borrowed from
// math/rand, whose algorithms may change).
type Sampler struct {
	N         int    // number of examples
	BatchSize int    // examples per batch; must be positive
	Shuffle   bool   // permute the examples anew each epoch
	Seed      uint64 // seeds the permutations
	// DropLast drops the final batch when it would be shorter than
	// BatchSize (a fixed batch shape means one traced graph and one plan);
	// otherwise the last batch holds the remainder.
	DropLast bool
}

// NumBatches is the number of batches in each epoch.
func (s Sampler) NumBatches() int {
	if s.BatchSize <= 0 || s.N <= 0 {
		return 0
	}
	if s.DropLast {
		return s.N / s.BatchSize
	}
	// Not (N+BatchSize-1)/BatchSize: that overflows for a huge BatchSize.
	n := s.N / s.BatchSize
	if s.N%s.BatchSize != 0 {
		n++
	}
	return n
}

// Order returns the order in which epoch visits the examples: 0..N-1, or a
// permutation of it when Shuffle is set.
func (s Sampler) Order(epoch int) []int {
	if !s.Shuffle {
		order := make([]int, max(s.N, 0))
		for i := range order {
			order[i] = i
		}
		return order
	}
	// Mix the epoch into the seed through splitmix64 so that neighbouring
	// epochs (and neighbouring seeds) get unrelated permutations.
	st := s.Seed ^ uint64(epoch)*0xD1B54A32D192ED03
	return Permutation(s.N, splitmix64(&st))
}

// Epoch yields the batches of one epoch as slices of example indices. The
// slices are views of the epoch's order (capacity-limited, so appending to
// one cannot overwrite the next); do not modify them. It panics if BatchSize is not
// positive, which is a programming error rather than a data problem.
func (s Sampler) Epoch(epoch int) iter.Seq[[]int] {
	if s.BatchSize <= 0 {
		panic(fmt.Sprintf("dataset: Sampler.BatchSize is %d, must be positive", s.BatchSize))
	}
	return func(yield func([]int) bool) {
		order := s.Order(epoch)
		for b := range s.NumBatches() {
			lo := b * s.BatchSize
			hi := lo + min(s.BatchSize, len(order)-lo) // lo+BatchSize may overflow
			if !yield(order[lo:hi:hi]) {
				return
			}
		}
	}
}

// Permutation returns a permutation of 0..n-1 determined by seed
// (a Fisher-Yates shuffle driven by splitmix64).
func Permutation(n int, seed uint64) []int {
	p := make([]int, max(n, 0))
	for i := range p {
		p[i] = i
	}
	st := seed
	for i := len(p) - 1; i > 0; i-- {
		j := int(bounded(&st, uint64(i+1)))
		p[i], p[j] = p[j], p[i]
	}
	return p
}

// splitmix64 advances the state and returns the next output (Steele, Lea and
// Flood, 2014): tiny, fast, and fixed forever, which is what reproducible
// shuffles need.
func splitmix64(st *uint64) uint64 {
	*st += 0x9E3779B97F4A7C15
	z := *st
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// bounded returns a uniform value in [0, n) without modulo bias (Lemire's
// multiply-and-reject method).
func bounded(st *uint64, n uint64) uint64 {
	hi, lo := bits.Mul64(splitmix64(st), n)
	if lo < n {
		thresh := -n % n
		for lo < thresh {
			hi, lo = bits.Mul64(splitmix64(st), n)
		}
	}
	return hi
}
