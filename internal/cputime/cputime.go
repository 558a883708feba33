// Package cputime reads the CPU time the process has used, all threads
// together, on every platform headroom builds for. On a machine shared
// with other work it measures a kernel's cost more steadily than wall time.
package cputime

import "time"

// Process is the user plus system CPU time of the process so far (0 where
// the system cannot say).
func Process() time.Duration { return process() }
