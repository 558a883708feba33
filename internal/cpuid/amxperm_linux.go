//go:build linux && amd64 && !purego

package cpuid

import (
	"errors"
	"fmt"
	"syscall"
	"unsafe"
)

// arch_prctl codes (arch/x86/include/uapi/asm/prctl.h) and the XSAVE
// feature number of the tile data.
const (
	archGetXcompPerm  = 0x1022
	archReqXcompPerm  = 0x1023
	xfeatureXtiledata = 18
)

// requestAMX asks Linux for XTILEDATA and confirms the grant. Linux also
// checks that every thread's alternate signal stack can hold the larger
// signal frame (ENOSPC if not): Go's signal stacks are 32 KiB, the frame
// with tile data about 11 KiB.
func requestAMX() error {
	if _, _, e := syscall.Syscall(syscall.SYS_ARCH_PRCTL, archReqXcompPerm, xfeatureXtiledata, 0); e != 0 {
		return fmt.Errorf("arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA): %w (%s)", e, permHint(e))
	}
	var mask uint64
	if _, _, e := syscall.Syscall(syscall.SYS_ARCH_PRCTL, archGetXcompPerm, uintptr(unsafe.Pointer(&mask)), 0); e != 0 {
		return fmt.Errorf("arch_prctl(ARCH_GET_XCOMP_PERM): %w", e)
	}
	if mask&(1<<xfeatureXtiledata) == 0 {
		return errors.New("arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) succeeded but ARCH_GET_XCOMP_PERM does not list XTILEDATA")
	}
	return nil
}

// permHint says what an arch_prctl error usually means.
func permHint(e syscall.Errno) string {
	switch e {
	case syscall.EOPNOTSUPP:
		return "no AMX tile state on this CPU or kernel"
	case syscall.EINVAL:
		return "the kernel is older than 5.16 or the CPU has no AMX"
	case syscall.EPERM, syscall.ENOSYS, syscall.EACCES:
		return "refused by a seccomp filter or sandbox"
	case syscall.ENOSPC:
		return "a thread's signal stack is too small for the tile state"
	}
	return "unexpected"
}
