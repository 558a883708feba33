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
// gives the weights of a run straight to step S+2, byte for byte.
func TestInterruptSavesCheckpoint(t *testing.T) {
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	common := []string{"train", "--model", "mlp", "--limit", "2000", "--batch-size", "8", "--lr", "0.01"}
	cmd := childCommand([]string{dataset.EnvDir + "="}, append(common, "--epochs", "1000", "--checkpoint-dir", ck, "--save-every", "5")...)
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
		if strings.Contains(lines.Text(), "(step 5, every 5 steps)") {
			cmd.Process.Signal(syscall.SIGINT)
			break
		}
	}
	for lines.Scan() {
		out.WriteString(lines.Text() + "\n")
	}
	waitChild(t, cmd)
	all := out.String() + stderr.String()
	if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(all, "interrupted") || !strings.Contains(all, "resume with: headroom train --resume "+ck) {
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
