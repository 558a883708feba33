package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/headroom-ml/headroom/comm"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/dist"
	"github.com/headroom-ml/headroom/optim"
)

// replicaFlags are `train --pipeline`'s flags of data parallelism across
// pipelines: N = D×P ranks hold D replicas of the P-stage pipeline.
type replicaFlags struct {
	replicas int
	zero     int
	bucket   string
}

func addReplicaFlags(fs *flag.FlagSet) *replicaFlags {
	f := &replicaFlags{}
	fs.IntVar(&f.replicas, "replicas", 1, "without mpirun: replicas of the pipeline, each on its share of every batch (in-process ranks: replicas × stages); under mpirun -np N it is N / --pipeline")
	fs.IntVar(&f.zero, "zero", 0, "with replicas: ZeRO stage over the replicas of each stage, 0 or 1 (optimizer state sharded)")
	fs.StringVar(&f.bucket, "bucket-size", "25MiB", "with replicas: the gradient bucket all-reduced over the replicas of a stage at once")
	return f
}

// ranks is the number of ranks of P stages: the job's under mpirun (size
// > 0), else replicas × P.
func (f *replicaFlags) ranks(P, size int) (int, error) {
	switch {
	case f.zero < 0 || f.zero > 1:
		return 0, fmt.Errorf("train --pipeline %d --zero %d: ZeRO 0 or 1 over the replicas of each stage (2 and 3 are not available with pipeline stages)", P, f.zero)
	case size > 0 && size%P != 0:
		return 0, fmt.Errorf("train --pipeline %d under mpirun -np %d: the ranks must be a multiple of the stages (replicas of the pipeline)", P, size)
	case size > 0 && f.replicas != 1 && f.replicas != size/P:
		return 0, fmt.Errorf("train --pipeline %d --replicas %d under mpirun -np %d: the replicas are N / --pipeline = %d", P, f.replicas, size, size/P)
	case size == 0 && f.replicas < 1:
		return 0, fmt.Errorf("train --replicas %d: at least 1", f.replicas)
	}
	if size > 0 {
		return size, nil
	}
	return f.replicas * P, nil
}

// replica builds world rank c.Rank()'s stage of its replica; done closes
// it and frees the communicators split for it.
func (f *replicaFlags) replica(ctx context.Context, c comm.Comm, P int, pj *dist.PipelineJob, cuts []int, dev *device.Device, newOpt func() (optim.Optimizer, error), micro int, seed int64, agree string) (r *dist.Replica, done func(), err error) {
	bucket, err := device.ParseBytes(f.bucket)
	if err != nil {
		return nil, nil, fmt.Errorf("--bucket-size: %w", err)
	}
	stages, data, err := dist.SplitPipelines(ctx, c, P)
	if err != nil {
		return nil, nil, err
	}
	free := func() {
		_ = comm.Close(stages)
		_ = comm.Close(data)
	}
	r, err = dist.NewReplica(ctx, stages, data, pj.Layers, pj.Loss, cuts, dev, newOpt, micro, seed,
		dist.ReplicaOptions{Zero: f.zero, BucketBytes: bucket, Schedule: pj.Schedule, Agree: agree})
	if err != nil {
		free()
		return nil, nil, err
	}
	return r, func() { r.Close(); free() }, nil
}
