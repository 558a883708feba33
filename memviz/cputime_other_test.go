//go:build !unix

package memviz_test

import "time"

// cpuTime is not measured here (see cputime_unix_test.go).
func cpuTime() time.Duration { return 0 }
