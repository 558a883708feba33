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
// Threads: CPU kernels split their loops over one process-wide pool of
// internal/parallel.Threads() workers (HEADROOM_NUM_THREADS, headroom's
// --threads). A loop started while another goroutine's loop holds the
// pool runs on its caller's goroutine alone: two trainers stepping at the
// same time share the pool rather than each getting the thread count, and
// the one that finds it busy runs that loop single-threaded. Results are
// the same either way; only speed differs. A per-trainer pool needs the
// kernels to be handed their pool (the backend seam), which they are not
// yet: goroutines have no cheap identity to tell a nested loop from a
// concurrent one (runtime.Stack costs about 10 microseconds per loop).
package train
