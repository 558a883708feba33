//go:build linux

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Linux only: the test reads the child's current system call from
// /proc/PID/syscall.

// A run blocked opening the dataset (a FIFO that no writer ever opens)
// stops at the first SIGINT too: the open cannot be interrupted, so the
// load is abandoned.
func TestInterruptWhileOpeningDataset(t *testing.T) {
	dir := fashionDir(t, 1)
	fifo := filepath.Join(dir, "train-images-idx3-ubyte")
	if err := os.Remove(fifo); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	cmd := childCommand(nil, "train", "--data", dir, "--model", "mlp")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var werr error
	go func() { werr = cmd.Wait(); close(exited) }()
	// Wait until a thread of the child is in openat(2), waiting for the
	// FIFO's writer where the kernel says so. (A signal sent earlier must
	// stop the run as well, so a transient openat seen here would not
	// change the outcome.)
	for !inSyscall(t, cmd.Process.Pid, syscall.SYS_OPENAT) {
		select {
		case <-exited:
			t.Fatalf("the child ended before opening the dataset: %v\n%s", werr, out.String())
		case <-time.After(time.Millisecond): // poll
		}
	}
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-exited:
	case <-time.After(liveness):
		cmd.Process.Kill()
		<-exited
		t.Fatalf("the child ignored SIGINT for %v while opening a FIFO:\n%s", liveness, out.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(out.String(), "interrupted") || !strings.Contains(out.String(), fifo) {
		t.Errorf("exit %d (%v), output %q; want 1 and an interrupted error naming the file", code, werr, out.String())
	}
}

// inSyscall reports whether a thread of process pid is in system call nr,
// from /proc/PID/task/TID/syscall; it skips the test where that is not
// readable.
func inSyscall(t *testing.T, pid int, nr uintptr) bool {
	t.Helper()
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/syscall", pid, task.Name()))
		if err != nil {
			if errors.Is(err, os.ErrPermission) {
				t.Skipf("cannot read the child's system calls: %v", err)
			}
			continue // the thread ended
		}
		if f := strings.Fields(string(b)); len(f) == 0 || f[0] != fmt.Sprint(nr) {
			continue
		}
		// Where the kernel names the wait, it must be a FIFO's open.
		w, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/wchan", pid, task.Name()))
		if err != nil || string(w) == "0" || string(w) == "" || string(w) == "wait_for_partner" {
			return true
		}
	}
	return false
}
