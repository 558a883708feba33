//go:build unix

package main

import "syscall"

// noFollow makes an open refuse a symlink at the path.
const noFollow = syscall.O_NOFOLLOW
