package main

import (
	"context"
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

// checkpointSharded is a checkpoint under ZeRO 3 or --tensor: every rank
// gathers the whole weights and optimizer state (collectives: the same
// steps on every rank, so not on interruption), rank 0 writes them.
func (d *distFlags) checkpointSharded(why string) (write bool, err error) {
	if why == "interrupted" {
		return false, fmt.Errorf("%s: no checkpoint on interruption: the ranks gather the model's pieces only between the same steps (the newest checkpoint on disk is complete)", d.shardedName())
	}
	if err := d.ckpt.Gather(context.Background()); err != nil {
		return false, err
	}
	return d.c.Rank() == 0, nil
}

// shardedName is the flag that shards the model: --zero 3 or --tensor T.
func (d *distFlags) shardedName() string {
	if d.tensor > 1 {
		return fmt.Sprintf("--tensor %d", d.tensor)
	}
	return "--zero 3"
}

// layout is the ranks' layout as dist plans it (train --budget on ranks:
// dist.FitRank), ZeRO 3's prefetch and tensor parallelism included.
func (d *distFlags) layout(ranks int, bucket int64) dist.Layout {
	l := dist.Layout{Ranks: ranks, Zero: d.zero, BucketBytes: bucket, Overlap: d.overlap, Prefetch: d.gatherPrefetch}
	if d.tensor > 1 {
		l.Tensor = d.tensor
	}
	return l
}
