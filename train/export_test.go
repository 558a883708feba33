package train

import "github.com/headroom-ml/headroom/internal/parallel"

// PoolStats reports what the pool of t's own backend has done, and
// whether t has one.
func PoolStats(t *Trainer) (parallel.Stats, bool) {
	b, ok := t.backend.(interface{ PoolStats() parallel.Stats })
	if !ok || !t.ownBackend {
		return parallel.Stats{}, false
	}
	return b.PoolStats(), true
}
