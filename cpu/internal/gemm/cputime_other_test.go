//go:build !unix

package gemm

import "time"

// processCPU is not measured here: 0.
func processCPU() time.Duration { return 0 }
