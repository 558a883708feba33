//go:build unix

package main

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// liveness bounds how long a child may take to react to a signal before the
// test gives up on it: a hang, not a measurement.
const liveness = 2 * time.Minute

// waitChild waits for cmd, killing it and failing the test if it does not
// exit within liveness.
func waitChild(t *testing.T, cmd *exec.Cmd) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(liveness):
		cmd.Process.Kill()
		<-done
		t.Fatalf("the child ignored the signal for %v", liveness)
		return nil
	}
}

// The first SIGINT cancels the run; it also restores the default handling,
// so that a second one ends a process that does not stop at once.
func TestSecondSignalExits(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envChildMode+"=signal")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := bufio.NewScanner(stdout)
		expect := func(prefix string) {
			if !lines.Scan() || !strings.HasPrefix(lines.Text(), prefix) {
				cmd.Process.Kill()
				t.Fatalf("%v: child said %q, want %q", sig, lines.Text(), prefix)
			}
		}
		expect("ready")
		cmd.Process.Signal(sig)
		expect("cancelled: context canceled")
		cmd.Process.Signal(sig)
		go io.Copy(io.Discard, stdout)
		err = waitChild(t, cmd)
		ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
		if !ok || !ws.Signaled() || ws.Signal() != sig {
			t.Errorf("%v twice: the child ended with %v, want killed by the signal", sig, err)
		}
	}
}

// A run blocked reading the dataset (a FIFO whose writer sends nothing)
// stops at the first SIGINT, with an error and exit status 1.
func TestInterruptWhileReadingDataset(t *testing.T) {
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
	// A non-blocking open for writing succeeds once the child has the FIFO
	// open for reading; holding it open, writing nothing, leaves the child
	// blocked in read.
	var w *os.File
	for w == nil {
		f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		switch {
		case err == nil:
			w = f
		case !errors.Is(err, syscall.ENXIO):
			t.Fatal(err)
		}
		select {
		case <-exited:
			t.Fatalf("the child ended before reading the dataset: %v\n%s", werr, out.String())
		case <-time.After(time.Millisecond): // poll for the reader
		}
	}
	defer w.Close()
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-exited:
	case <-time.After(liveness):
		cmd.Process.Kill()
		<-exited
		t.Fatalf("the child ignored SIGINT for %v while reading a FIFO:\n%s", liveness, out.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(out.String(), "interrupted") || !strings.Contains(out.String(), fifo) {
		t.Errorf("exit %d (%v), output %q; want 1 and an interrupted error naming the file", code, werr, out.String())
	}
}
