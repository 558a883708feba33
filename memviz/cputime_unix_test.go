//go:build unix

package memviz_test

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time (user and system) the process has used: under
// load, wall-clock times say more about the machine than about the code.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
