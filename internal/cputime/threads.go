package cputime

import (
	"strconv"
	"strings"
	"time"
)

// Thread is what the scheduler says of one of the process's threads: the
// time it ran on a CPU and the time it was ready to run but waited for
// one (other threads or processes had the CPUs).
type Thread struct {
	ID        int
	Run, Wait time.Duration
}

// Threads reports every thread of the process, or nil where the system
// does not say (only Linux does: /proc/self/task/*/schedstat). Between two
// calls, a parallel kernel whose threads each ran about the wall time and
// waited little had the CPUs to itself: if it was slow, the CPUs were
// (another virtual machine on the same cores, say), not its threads.
func Threads() []Thread { return threads() }

// parseSchedstat reads a schedstat line: nanoseconds run, nanoseconds
// waited on a run queue, time slices.
func parseSchedstat(s string) (Thread, bool) {
	f := strings.Fields(s)
	if len(f) < 2 {
		return Thread{}, false
	}
	run, err1 := strconv.ParseInt(f[0], 10, 64)
	wait, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		return Thread{}, false
	}
	return Thread{Run: time.Duration(run), Wait: time.Duration(wait)}, true
}
