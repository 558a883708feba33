package main

import (
	"bytes"
	"context"
	"image"
	"image/color"
	"image/png"
	"math/rand"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/zoo"
)

// headroom upscale at a budget its untiled pass does not fit writes what
// the untiled pass writes (to within one level of 255), within the budget.
func TestUpscaleCommand(t *testing.T) {
	dir := t.TempDir()
	s := nn.NewStore()
	zoo.NewRRDBNet(s.Root(), zoo.RRDBNetConfig{InNC: 3, OutNC: 3, NF: 8, NB: 1, GC: 4})
	if err := s.Materialize(device.CPU(), 3); err != nil {
		t.Fatal(err)
	}
	weights := filepath.Join(dir, "g.safetensors")
	if err := s.SaveFile(weights, nil); err != nil {
		t.Fatal(err)
	}
	s.Release()
	const h, w = 150, 123
	r := rand.New(rand.NewSource(1))
	m := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			m.SetNRGBA(x, y, color.NRGBA{uint8(r.Intn(256)), uint8(x * 2), uint8(y), 255})
		}
	}
	in := filepath.Join(dir, "in.png")
	f, _ := os.Create(in)
	if err := png.Encode(f, m); err != nil {
		t.Fatal(err)
	}
	f.Close()
	run := func(out string, args ...string) string {
		var buf bytes.Buffer
		if err := upscaleMain(context.Background(), append(append([]string{"--weights", weights}, args...), in, out), &buf); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, buf.String())
		}
		return buf.String()
	}
	ref := filepath.Join(dir, "ref.png")
	refOut := run(ref, "--budget", "1GiB")
	if !strings.Contains(refOut, "tile 150 px") {
		t.Fatalf("1 GiB should hold the untiled pass:\n%s", refOut)
	}
	mm := regexp.MustCompile(`untiled pass plans ([\d.]+ \w+)`).FindStringSubmatch(refOut)
	if mm == nil {
		t.Fatalf("no untiled plan:\n%s", refOut)
	}
	whole, err := device.ParseBytes(strings.ReplaceAll(mm[1], " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	tiled := filepath.Join(dir, "tiled.png")
	got := run(tiled, "--budget", device.FormatBytes(whole-1<<20))
	t.Log(got)
	if strings.Contains(got, "tile 150 px") || !strings.Contains(got, " 0 OOMs") {
		t.Fatalf("under the untiled pass's memory:\n%s", got)
	}
	// --plan prints the same plan, by weights or by their shape, and
	// runs nothing.
	budget := device.FormatBytes(whole - 1<<20)
	for _, args := range [][]string{{"--weights", weights}, {"--nf", "8", "--nb", "1", "--gc", "4"}} {
		var buf bytes.Buffer
		if err := upscaleMain(context.Background(), append(append([]string{"--plan", "--budget", budget}, args...), in), &buf); err != nil {
			t.Fatalf("--plan %v: %v", args, err)
		}
		if lines := strings.SplitAfterN(got, "\n", 3); buf.String() != lines[0]+lines[1] {
			t.Errorf("--plan %v printed\n%s\nthe run planned\n%s", args, buf.String(), lines[0]+lines[1])
		}
	}
	a, b := readPNG(t, ref), readPNG(t, tiled)
	if a.Bounds() != image.Rect(0, 0, 4*w, 4*h) || b.Bounds() != a.Bounds() {
		t.Fatalf("sizes %v and %v", a.Bounds(), b.Bounds())
	}
	for i := range a.Pix {
		if d := int(a.Pix[i]) - int(b.Pix[i]); d > 1 || d < -1 {
			t.Fatalf("byte %d: %d untiled, %d tiled", i, a.Pix[i], b.Pix[i])
		}
	}
}

// readPNG returns a PNG's pixels (an opaque one decodes as RGBA, which is
// NRGBA's bytes when alpha is 255).
func readPNG(t *testing.T, path string) *image.RGBA {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	n, ok := m.(*image.RGBA)
	if !ok {
		t.Fatalf("%s: %T", path, m)
	}
	return n
}
