//go:build unix

package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/headroom-ml/headroom/dataset"
	"github.com/headroom-ml/headroom/train"
)

// Ctrl-C during training saves the last complete step as a checkpoint
// and exits 1 with a message; resuming from it and training to step S+2
// gives the weights of a run straight to step S+2, byte for byte (with a
// learning-rate warm-up under way). After
// SIGKILL the newest periodic checkpoint does the same.
func TestInterruptSavesCheckpoint(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) { interruptAndResume(t, sig) })
	}
}

func interruptAndResume(t *testing.T, sig syscall.Signal) {
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	// The warm-up (its rates do not depend on the run's length) is still
	// going at the interruption: the schedule's position is restored too.
	common := []string{"train", "--model", "mlp", "--limit", "2000", "--batch-size", "8", "--lr", "0.01", "--lr-warmup-steps", "20"}
	every := "5"
	if sig == syscall.SIGKILL {
		every = "1" // killed at any point, a checkpoint at most a step old
	}
	cmd := childCommand([]string{dataset.EnvDir + "="}, append(common, "--epochs", "1000", "--checkpoint-dir", ck, "--save-every", every)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		out.WriteString(lines.Text() + "\n")
		if strings.Contains(lines.Text(), "(step 5, every "+every+" steps)") {
			cmd.Process.Signal(sig)
			break
		}
	}
	for lines.Scan() {
		out.WriteString(lines.Text() + "\n")
	}
	waitChild(t, cmd)
	all := out.String() + stderr.String()
	if sig == syscall.SIGKILL {
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("not killed: %v\n%s", cmd.ProcessState, all)
		}
		// What the kill left half written is cleaned up by the resumed run.
	} else if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(all, "interrupted") || !strings.Contains(all, "resume with: headroom train --resume "+ck) {
		t.Fatalf("exit %d, output:\n%s", code, all)
	}
	latest, err := train.LatestCheckpoint(ck)
	if err != nil {
		t.Fatal(err)
	}
	var step int
	if _, err := fmt.Sscanf(filepath.Base(latest), "step-%d", &step); err != nil || step < 5 {
		t.Fatalf("newest checkpoint %s", latest)
	}
	t.Setenv(dataset.EnvDir, "")
	target := fmt.Sprint(step + 2)
	straight, resumed := filepath.Join(dir, "straight.safetensors"), filepath.Join(dir, "resumed.safetensors")
	trainArgs(t, append(common[1:], "--steps", target, "--save", straight)...)
	trainArgs(t, append(common[1:], "--steps", target, "--resume", ck, "--save", resumed)...)
	a, _ := os.ReadFile(straight)
	b, _ := os.ReadFile(resumed)
	if len(a) == 0 || !bytes.Equal(a, b) {
		t.Errorf("resumed from step %d: weights differ from a straight run to step %s", step, target)
	}
}
