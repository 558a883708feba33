package main

import (
	"fmt"

	"github.com/headroom-ml/headroom/dist"
)

const gatherPrefetchUsage = "ZeRO 3: gather the parameters of this many layers ahead of the layer computing, in the forward and the backward pass (FSDP's prefetch: their transfers can overlap its compute; the extra gathered layers are planned); 0: each layer's just before its use"

// checkGatherPrefetch refuses --gather-prefetch outside ZeRO 3.
func checkGatherPrefetch(depth, zero, tensor int) error {
	switch {
	case depth < 0:
		return fmt.Errorf("--gather-prefetch %d: at least 0", depth)
	case depth > 0 && (zero != 3 || tensor > 1):
		return fmt.Errorf("--gather-prefetch %d: only with --zero 3 (the other layouts gather no parameters)", depth)
	}
	return nil
}

// withGatherPrefetch gives plan --ranks's ZeRO-3 layouts the prefetch
// depth; with another stage fixed it is refused.
func withGatherPrefetch(ls []dist.Layout, depth int, zero string) ([]dist.Layout, error) {
	if depth == 0 {
		return ls, nil
	}
	if depth < 0 || zero != "" && zero != "3" {
		return nil, checkGatherPrefetch(depth, -1, 1)
	}
	n := 0
	for i := range ls {
		if ls[i].Zero == 3 && ls[i].Tensor <= 1 && ls[i].Pipeline <= 1 {
			ls[i].Prefetch = depth
			n++
		}
	}
	if n == 0 {
		return nil, checkGatherPrefetch(depth, -1, 1)
	}
	return ls, nil
}
