package main

import (
	"flag"

	"github.com/headroom-ml/headroom/dist"
	"github.com/headroom-ml/headroom/zoo"
)

// flagSet reports whether the flag name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// moreLayouts are the layouts `plan --budget` tries besides ZeRO 0–2 when
// neither a stage nor a tensor degree is fixed: ZeRO 3 (not with
// clipping, which needs every gradient whole) and, for a GPT whose heads
// split evenly over all the ranks, tensor parallelism over them (the only
// tensor layout package dist plans yet: one tensor-parallel group).
func moreLayouts(j dist.Job, ranks int, bucket int64, clip bool) []dist.Layout {
	var ls []dist.Layout
	if !clip {
		ls = append(ls, dist.Layout{Ranks: ranks, Zero: 3, BucketBytes: bucket})
	}
	if cfg, err := dist.TensorGPTConfig(j); err == nil && ranks > 1 && zoo.CheckTensorParallel(cfg, ranks) == nil {
		ls = append(ls, dist.Layout{Ranks: ranks, Tensor: ranks, BucketBytes: bucket})
	}
	return ls
}
