// Package train runs training: it traces a model's step once per input
// shape signature (a shorter last batch gets its own plan), appends the
// backward pass, plans memory, executes on a device and applies the
// optimizer to parameters in device memory.
//
// # Concurrency
//
// A Trainer, the nn.Store it trains and the optimizer it was given are not
// safe for concurrent use: Step, StepAccumulate, Predict, Plan, SetConfig,
// ReleaseMemory and Close of one trainer must not overlap, and nothing
// else may read or write its parameters while a step runs. Wrap them in a
// mutex to share one trainer between goroutines.
//
// Different trainers, each on a device of its own, are independent and may
// step concurrently (TestTrainersStepConcurrently). A device's allocator
// takes a lock per call: its statistics and snapshots may be read at any
// time, from any goroutine.
//
// Threads: each trainer runs its kernels through a backend of its own
// (backend.Threaded: the cpu backend with a worker pool of the trainer's
// own), with Config.Threads threads: two trainers stepping at the same
// time each split their loops over their own threads. Config.Threads 0
// follows the process-wide count (internal/parallel: HEADROOM_NUM_THREADS,
// headroom's --threads), still on the trainer's own pool. Close stops the
// pool's goroutines (a trainer dropped without Close has them stopped once
// it is collected). The optimizer's update loops run on the trainer's
// pool too, for optimizers that take one (optim.Adam and AdamW:
// SetLoops); SGD's update is a plain loop. What trainers still share is
// the process: its memory and cores (two trainers of 2 threads each on 2
// cores take turns) and the process-wide pool, which the kernels run
// outside a trainer use (cpu.Run, the reference checks). Results never
// depend on the thread count; only speed does.
package train
