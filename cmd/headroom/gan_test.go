package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
)

// A small ESRGAN pair trains on random images: the measured peak is the
// plan's, the perceptual term is skipped with a message when no weights
// are given, and flag mistakes are refused before any work.
func TestGANCommand(t *testing.T) {
	small := []string{"--batch", "2", "--nf", "8", "--nb", "1", "--gc", "4", "--d-features", "4"}
	var out bytes.Buffer
	if err := ganMain(context.Background(), append(small, "--steps", "2"), &out); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	if !strings.Contains(s, "perceptual loss skipped: no --vgg file given") {
		t.Errorf("no message about the skipped perceptual loss:\n%s", s)
	}
	m := regexp.MustCompile(`measured peak (\S+ \S+) \(planned (\S+ \S+)\)`).FindStringSubmatch(s)
	if m == nil || m[1] != m[2] {
		t.Errorf("measured and planned peaks differ or are missing: %q\n%s", m, s)
	}
	if n := len(regexp.MustCompile(`(?m)^iteration \d+: G `).FindAllString(s, -1)); n != 2 {
		t.Errorf("%d iterations reported, want 2:\n%s", n, s)
	}

	out.Reset()
	if err := ganMain(context.Background(), append(small, "--plan-only", "--vgg-random"), &out); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "skipped") || !strings.Contains(out.String(), "parameters (G, D, VGG)") {
		t.Errorf("--vgg-random plan:\n%s", out.String())
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--batch", "1"}, "at least 2"},
		{[]string{"--crop", "96"}, "128 or 256"},
		{[]string{"--scale", "2", "--crop", "128"}, "upscales by 4"},
		{[]string{"--recompute", "all"}, "none, selective or regions"},
		{[]string{"--precision", "fp8"}, "--precision"},
		{[]string{"--budget", "lots"}, "--budget"},
		{[]string{"--vgg", "/nonexistent.safetensors"}, "--vgg"},
		{[]string{"--vgg", "x", "--vgg-random"}, "exclude"},
		{[]string{"extra"}, "unexpected argument"},
	} {
		err := ganMain(context.Background(), c.args, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error saying %q", c.args, err, c.want)
		}
	}
}

// Under a budget the planner's choice is printed and used; a budget no
// option meets is an error naming the least memory.
func TestGANCommandBudget(t *testing.T) {
	small := []string{"--batch", "2", "--nf", "8", "--nb", "2", "--gc", "4", "--d-features", "4", "--plan-only"}
	var out bytes.Buffer
	if err := ganMain(context.Background(), append(small, "--budget", "1GiB"), &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "chosen: ") {
		t.Errorf("no choice printed:\n%s", out.String())
	}
	err := ganMain(context.Background(), append(small, "--budget", "1KiB"), &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "the least memory is") {
		t.Errorf("1KiB: %v", err)
	}
}
