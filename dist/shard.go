package dist

import (
	"fmt"

	"github.com/headroom-ml/headroom/train"
)

// ShardIndices returns rank's share of a global batch of sample indices:
// a contiguous run, the shares' sizes differing by at most one (the first
// ranks take the extra samples), as ShardBatch splits a batch. It is how
// a sampler's batches are divided among ranks, so that one step of N ranks
// sees exactly the global batch of one process. Every rank gets a share
// only when len(idx) >= size.
func ShardIndices(idx []int, rank, size int) []int {
	lo, hi := shareOf(len(idx), rank, size)
	return idx[lo:hi:hi]
}

// shareOf is [lo, hi) of rank's share of n samples.
func shareOf(n, rank, size int) (lo, hi int) {
	q, r := n/size, n%size
	lo = rank*q + min(rank, r)
	hi = lo + q
	if rank < r {
		hi++
	}
	return lo, hi
}

// ShardBatch returns rank's share of a global batch (train.Split's
// pieces): the same samples as ShardIndices of the batch's indices.
func ShardBatch(b train.Batch, rank, size int) (train.Batch, error) {
	if rank < 0 || rank >= size {
		return train.Batch{}, fmt.Errorf("%w: rank %d of %d", ErrConfig, rank, size)
	}
	n := 0
	if len(b.X.Shape) > 0 {
		n = b.X.Shape[0]
	}
	if n < size {
		return train.Batch{}, fmt.Errorf("%w: a batch of %d samples cannot give each of %d ranks one", ErrConfig, n, size)
	}
	parts, err := train.Split(b, size)
	if err != nil {
		return train.Batch{}, err
	}
	return parts[rank], nil
}
