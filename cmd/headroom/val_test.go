package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/dataset"
	"github.com/headroom-ml/headroom/idx"
)

// writeIDX writes NAME-images-idxN-ubyte and NAME-labels-idx1-ubyte in dir:
// n samples of shape dims (ubyte) labelled i%3.
func writeIDXPair(t *testing.T, dir, name string, n int, dims ...int) {
	t.Helper()
	size := 1
	for _, d := range dims {
		size *= d
	}
	data := make([]byte, n*size)
	for i := range data {
		data[i] = byte(i * 37 % 251)
	}
	labels := make([]byte, n)
	for i := range labels {
		labels[i] = byte(i % 3)
	}
	for _, f := range []struct {
		file string
		idx  *idx.File
	}{
		{name + "-images-idx" + string(rune('1'+len(dims))) + "-ubyte", &idx.File{Name: "images", Type: idx.Uint8, Dims: append([]int{n}, dims...), Data: data}},
		{name + "-labels-idx1-ubyte", &idx.File{Name: "labels", Type: idx.Uint8, Dims: []int{n}, Data: labels}},
	} {
		w, err := os.Create(filepath.Join(dir, f.file))
		if err != nil {
			t.Fatal(err)
		}
		if err := idx.Write(w, f.idx); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// IDX files train any classifier whose input their samples fit: reshaped
// when the values agree, resized (grey repeated to RGB) when they are
// images; otherwise the error names both shapes. --val evaluates a
// separate set each epoch.
func TestTrainIDXAndVal(t *testing.T) {
	t.Setenv(dataset.EnvDir, "")
	dir := t.TempDir()
	grey := filepath.Join(dir, "grey")
	flat := filepath.Join(dir, "flat")
	odd := filepath.Join(dir, "odd")
	for _, d := range []string{grey, flat, odd} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeIDXPair(t, grey, "train", 12, 20, 20)
	writeIDXPair(t, grey, "t10k", 6, 20, 20)
	writeIDXPair(t, flat, "digits", 12, 784)
	writeIDXPair(t, odd, "odd", 12, 10)
	folder := writeImageFolder(t, dir, 3, 2, 12, 10)
	table := writeTable(t, dir, 12)

	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"grey IDX on resnet18-64, t10k as --val", []string{"--model", "resnet18-64", "--data", grey, "--val", grey},
			[]string{"samples of shape [20 20], grey repeated to 3 channels, resized to 64x64", "validation: IDX files " + filepath.Join(grey, "t10k-images"), "val loss"}},
		{"flat IDX file on mlp", []string{"--model", "mlp", "--data", filepath.Join(flat, "digits-images-idx2-ubyte")},
			[]string{"samples of shape [784], as [1 28 28]", "through the loader"}},
		{"image folder --val", []string{"--model", "resnet18-64", "--data", folder, "--val", folder},
			[]string{"validation: image folder", "val loss"}},
		{"table with an IDX --val", []string{"--model", "mlp", "--data", table, "--val", flat},
			[]string{"validation: IDX files", "val loss"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := trainArgs(t, append(c.args, "--steps", "2", "--batch-size", "4")...)
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("no %q in:\n%s", w, out)
				}
			}
		})
	}
	// The Fashion models read a Fashion-MNIST directory as before, and
	// take a --val set normalized as their training data.
	if out := trainArgs(t, "--model", "mlp", "--limit", "64", "--steps", "2", "--val", flat); !strings.Contains(out, "val loss") || !strings.Contains(out, "test loss") {
		t.Errorf("Fashion-MNIST with --val:\n%s", out)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--model", "mlp", "--data", odd}, "samples of shape [10], which neither hold the 784 values of mlp's input [1 28 28]"},
		{[]string{"--model", "resnet18-64", "--data", flat}, "samples of shape [784], which neither hold the 12288 values of resnet18-64's input [3 64 64]"},
		{[]string{"--model", "mlp", "--data", table, "--val", filepath.Join(dir, "none")}, "--val"},
		{[]string{"--model", "mlp", "--data", table, "--val", flat, "--val-split", "0.2"}, "give one validation set"},
		{[]string{"--model", "gpt-shakespeare-char", "--val", flat}, "validation sets are for the classifiers"},
	} {
		var f trainFlags
		fs := trainFlagSet(&f)
		if err := parseFlags(fs, append(c.args, "--steps", "1")); err != nil {
			t.Fatal(err)
		}
		err := runTrain(t.Context(), fs, f)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
}
