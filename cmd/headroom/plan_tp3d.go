package main

import (
	"github.com/headroom-ml/headroom/dist"
	"github.com/headroom-ml/headroom/zoo"
)

// pipeTensorLayouts are the tensor × pipeline layouts plan --budget
// tries next to P pipeline stages alone on ranks ranks: for a GPT, each
// tensor degree T > 1 that divides both the ranks of a stage (ranks/P)
// and the heads, ZeRO 0 over the replicas.
func pipeTensorLayouts(j dist.Job, ranks, P int, bucket int64) []dist.Layout {
	cfg, err := dist.TensorGPTConfig(j)
	if err != nil || P < 2 || ranks%P != 0 {
		return nil
	}
	var ls []dist.Layout
	for T := 2; T <= ranks/P; T++ {
		if (ranks/P)%T == 0 && zoo.CheckTensorParallel(cfg, T) == nil {
			ls = append(ls, dist.Layout{Ranks: ranks, Pipeline: P, Tensor: T, BucketBytes: bucket})
		}
	}
	return ls
}
