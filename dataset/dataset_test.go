package dataset

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/headroom-ml/headroom/idx"
)

// facts mirrors the file written by internal/mksubset from the real
// Fashion-MNIST files: it lets these tests check the embedded subset against
// the real data on machines that do not have it.
type facts struct {
	Full      map[string]splitFacts `json:"full"`
	Subset    map[string]splitFacts `json:"subset"`
	TrainMean float64               `json:"train_mean"`
	TrainStd  float64               `json:"train_std"`
}

type splitFacts struct {
	Count        int             `json:"count"`
	ClassCounts  [NumClasses]int `json:"class_counts"`
	PixelSum     uint64          `json:"pixel_sum"`
	ImagesSHA256 string          `json:"images_sha256"`
	LabelsSHA256 string          `json:"labels_sha256"`
}

func loadFacts(t *testing.T) facts {
	t.Helper()
	b, err := os.ReadFile("testdata/subset-facts.json")
	if err != nil {
		t.Fatal(err)
	}
	var f facts
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	return f
}

func describe(d *Dataset) splitFacts {
	s := splitFacts{Count: d.Len(), ClassCounts: d.ClassCounts()}
	for _, p := range d.Images {
		s.PixelSum += uint64(p)
	}
	hi, hl := sha256.Sum256(d.Images), sha256.Sum256(d.Labels)
	s.ImagesSHA256, s.LabelsSHA256 = hex.EncodeToString(hi[:]), hex.EncodeToString(hl[:])
	return s
}

func TestSubset(t *testing.T) {
	want := loadFacts(t)
	for _, tt := range []struct {
		split string
		n     int
	}{{Train, SubsetTrain}, {Test, SubsetTest}} {
		t.Run(tt.split, func(t *testing.T) {
			d, err := Load(Subset(), Embedded, tt.split)
			if err != nil {
				t.Fatal(err)
			}
			if d.Len() != tt.n || len(d.Images) != tt.n*Pixels || d.Split != tt.split || d.Source != Embedded {
				t.Fatalf("got %d labels, %d pixels, split %q, source %q; want %d examples", d.Len(), len(d.Images), d.Split, d.Source, tt.n)
			}
			got := describe(d)
			if got != want.Subset[tt.split] {
				t.Errorf("subset facts differ from the generator's:\n got %+v\nwant %+v", got, want.Subset[tt.split])
			}
			// Every class is present in a prefix this long; a missing class
			// would make accuracy on the subset meaningless.
			for c, n := range got.ClassCounts {
				if n < tt.n/NumClasses/2 {
					t.Errorf("class %d (%s) has only %d examples", c, Classes[c], n)
				}
			}
		})
	}
}

// With the Debian package installed, check the real files against published
// facts, the committed facts, the subset, and the normalization constants.
func TestSystemFiles(t *testing.T) {
	if _, err := os.Stat(SystemDir); err != nil {
		t.Skipf("%s not installed (Debian package dataset-fashion-mnist); the subset is checked against committed facts instead", SystemDir)
	}
	want := loadFacts(t)
	for _, tt := range []struct {
		split       string
		n, perClass int // published by Zalando Research
		subset      int
	}{{Train, 60000, 6000, SubsetTrain}, {Test, 10000, 1000, SubsetTest}} {
		t.Run(tt.split, func(t *testing.T) {
			full, err := FashionMNIST(SystemDir, tt.split)
			if err != nil {
				t.Fatal(err)
			}
			got := describe(full)
			if got.Count != tt.n {
				t.Errorf("count %d, want %d", got.Count, tt.n)
			}
			for c, n := range got.ClassCounts {
				if n != tt.perClass {
					t.Errorf("class %d has %d examples, want %d", c, n, tt.perClass)
				}
			}
			if got != want.Full[tt.split] {
				t.Errorf("facts differ from the committed ones:\n got %+v\nwant %+v", got, want.Full[tt.split])
			}
			sub, err := Load(Subset(), Embedded, tt.split)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(sub.Images, full.Images[:tt.subset*Pixels]) || !bytes.Equal(sub.Labels, full.Labels[:tt.subset]) {
				t.Error("embedded subset is not the prefix of the real files")
			}
			if tt.split == Train {
				var sum, sq float64
				for _, p := range full.Images {
					v := float64(p) / 255
					sum += v
					sq += v * v
				}
				n := float64(len(full.Images))
				mean := sum / n
				std := math.Sqrt(sq/n - mean*mean)
				if math.Abs(mean-TrainMean) > 1e-9 || math.Abs(std-TrainStd) > 1e-9 {
					t.Errorf("mean, std = %v, %v; constants say %v, %v", mean, std, TrainMean, TrainStd)
				}
			}
		})
	}
}

// subsetFiles returns the embedded subset's files decompressed.
func subsetFiles(t *testing.T) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	ents, err := fs.ReadDir(Subset(), ".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := fs.ReadFile(Subset(), e.Name())
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		raw, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimSuffix(e.Name(), ".gz")] = raw
	}
	if len(out) != 4 {
		t.Fatalf("subset has files %v, want 4", ents)
	}
	return out
}

func TestLoadRawGzipAndMixed(t *testing.T) {
	raw := subsetFiles(t)
	dirs := map[string]func(name string) bool{ // which files to gzip
		"raw":   func(string) bool { return false },
		"gzip":  func(string) bool { return true },
		"mixed": func(name string) bool { return strings.Contains(name, "images") },
	}
	ref, err := Load(Subset(), Embedded, Train)
	if err != nil {
		t.Fatal(err)
	}
	for name, compress := range dirs {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			for base, b := range raw {
				if compress(base) {
					var buf bytes.Buffer
					zw := gzip.NewWriter(&buf)
					zw.Write(b)
					zw.Close()
					base, b = base+".gz", buf.Bytes()
				}
				if err := os.WriteFile(filepath.Join(dir, base), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			d, err := FashionMNIST(dir, Train)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(d.Images, ref.Images) || !bytes.Equal(d.Labels, ref.Labels) || d.Source != dir {
				t.Error("loaded data differs from the embedded subset")
			}
		})
	}
}

// ubyte encodes an uncompressed ubyte IDX file.
func ubyte(t *testing.T, dims []int, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := idx.Write(&buf, &idx.File{Type: idx.Uint8, Dims: dims, Data: data}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestLoadErrors(t *testing.T) {
	const (
		img = "train-images-idx3-ubyte"
		lbl = "train-labels-idx1-ubyte"
	)
	goodImages := ubyte(t, []int{3, Rows, Cols}, make([]byte, 3*Pixels))
	goodLabels := ubyte(t, []int{3}, []byte{0, 9, 4})
	int32Labels := []byte{0, 0, 0x0C, 1, 0, 0, 0, 1, 0, 0, 0, 7}

	tests := []struct {
		name  string
		files fstest.MapFS
		split string
		want  []string // substrings of the error
		is    error
		as    bool // want an *idx.FormatError
	}{
		{name: "unknown split", split: "validation", want: []string{`unknown split "validation"`}},
		{name: "no images", files: fstest.MapFS{lbl: {Data: goodLabels}}, split: Train,
			want: []string{"neither " + img + " nor " + img + ".gz found in data/fm"}, is: fs.ErrNotExist},
		{name: "no labels", files: fstest.MapFS{img: {Data: goodImages}}, split: Train,
			want: []string{lbl}, is: fs.ErrNotExist},
		{name: "test split files", files: fstest.MapFS{img: {Data: goodImages}, lbl: {Data: goodLabels}}, split: Test,
			want: []string{"t10k-images-idx3-ubyte"}, is: fs.ErrNotExist},
		{name: "count mismatch", files: fstest.MapFS{img: {Data: goodImages}, lbl: {Data: ubyte(t, []int{2}, []byte{1, 2})}}, split: Train,
			want: []string{"data/fm/" + img + " holds 3 images but data/fm/" + lbl + " holds 2 labels"}},
		{name: "label out of range", files: fstest.MapFS{img: {Data: goodImages}, lbl: {Data: ubyte(t, []int{3}, []byte{0, 1, 10})}}, split: Train,
			want: []string{"data/fm/" + lbl, "label 10 of example 2 (offset 10)", "0..9"}},
		{name: "wrong image size", files: fstest.MapFS{img: {Data: ubyte(t, []int{3, 28, 27}, make([]byte, 3*28*27))}, lbl: {Data: goodLabels}}, split: Train,
			want: []string{"data/fm/" + img, "[3 28 27]", "want ubyte [n 28 28]"}},
		{name: "images not 3-d", files: fstest.MapFS{img: {Data: ubyte(t, []int{3 * Pixels}, make([]byte, 3*Pixels))}, lbl: {Data: goodLabels}}, split: Train,
			want: []string{"data/fm/" + img, "want ubyte [n 28 28]"}},
		{name: "labels not ubyte", files: fstest.MapFS{img: {Data: ubyte(t, []int{1, Rows, Cols}, make([]byte, Pixels))}, lbl: {Data: int32Labels}}, split: Train,
			want: []string{"data/fm/" + lbl, "int [1]", "want ubyte [n]"}},
		{name: "truncated images", files: fstest.MapFS{img: {Data: goodImages[:100]}, lbl: {Data: goodLabels}}, split: Train,
			want: []string{"data/fm/" + img, "truncated data", "need 2352 bytes, only 84 present"}, as: true},
		{name: "no examples", files: fstest.MapFS{img: {Data: ubyte(t, []int{0, Rows, Cols}, nil)}, lbl: {Data: ubyte(t, []int{0}, nil)}}, split: Train,
			want: []string{"data/fm/" + img, "0 images"}, is: ErrEmpty},
		{name: "labels file is garbage", files: fstest.MapFS{img: {Data: goodImages}, lbl: {Data: []byte("hello, world")}}, split: Train,
			want: []string{"data/fm/" + lbl, "wrong magic"}, as: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Load(tt.files, "data/fm", tt.split)
			if err == nil {
				t.Fatalf("loaded %d examples, want error", d.Len())
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %v is not %v", err, tt.is)
			}
			var fe *idx.FormatError
			if tt.as && !errors.As(err, &fe) {
				t.Errorf("error %T is not an *idx.FormatError", err)
			}
		})
	}
}

func TestLocate(t *testing.T) {
	t.Run("env dir", func(t *testing.T) {
		dir := t.TempDir()
		for base, b := range subsetFiles(t) {
			if err := os.WriteFile(filepath.Join(dir, base), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		t.Setenv(EnvDir, dir)
		fsys, source, full, err := Locate()
		if err != nil || source != dir || !full {
			t.Fatalf("Locate = %v, %q, %v, %v; want %q, true", fsys, source, full, err, dir)
		}
		train, test, source, err := Open()
		if err != nil || source != dir || train.Len() != SubsetTrain || test.Len() != SubsetTest {
			t.Fatalf("Open: %v, source %q", err, source)
		}
	})
	t.Run("env dir incomplete", func(t *testing.T) {
		dir := t.TempDir()
		t.Setenv(EnvDir, dir)
		_, _, _, err := Locate()
		if err == nil || !strings.Contains(err.Error(), EnvDir) || !strings.Contains(err.Error(), dir) || !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("err = %v, want one naming $%s and %s", err, EnvDir, dir)
		}
		if _, _, _, err := Open(); err == nil {
			t.Error("Open: want error")
		}
	})
	t.Run("no system dir", func(t *testing.T) {
		fsys, source, full, err := locate("", filepath.Join(t.TempDir(), "absent"))
		if err != nil || source != Embedded || full {
			t.Fatalf("locate = %q, %v, %v; want the embedded subset", source, full, err)
		}
		if _, err := Load(fsys, source, Test); err != nil {
			t.Error(err)
		}
	})
	t.Run("system dir incomplete", func(t *testing.T) {
		dir := t.TempDir()
		_, _, _, err := locate("", dir)
		if err == nil || !strings.Contains(err.Error(), dir) || strings.Contains(err.Error(), EnvDir) {
			t.Errorf("err = %v, want one naming %s and not $%s", err, dir, EnvDir)
		}
	})
	t.Run("default", func(t *testing.T) {
		t.Setenv(EnvDir, "")
		_, source, full, err := Locate()
		if err != nil {
			t.Fatal(err)
		}
		_, statErr := os.Stat(SystemDir)
		if wantFull := statErr == nil; full != wantFull || (full && source != SystemDir) || (!full && source != Embedded) {
			t.Errorf("Locate = %q, %v; %s present: %v", source, full, SystemDir, wantFull)
		}
	})
}
