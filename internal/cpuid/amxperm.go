package cpuid

import "sync"

// RequestAMX asks the operating system for permission to use the AMX tile
// registers (Linux: arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA, 5.16 and
// later) and reports nil where it is granted, else why not. It asks once
// per process, on the first call (the permission is the process's, for
// all its threads); the kernels call it before their first AMX use, so
// that a process that never runs them never asks. It does not look at
// CPUID: callers check Features.AMXTile first.
func RequestAMX() error {
	amxOnce.Do(func() { amxErr = requestAMX() })
	return amxErr
}

var (
	amxOnce sync.Once
	amxErr  error
)
