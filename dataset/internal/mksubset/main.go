// Command mksubset writes the Fashion-MNIST subset that the dataset package
// embeds, so that headroom trains and tests on machines without the Debian
// package dataset-fashion-mnist, and records facts about the real files that
// the tests check the subset (and, where present, the real files) against.
//
// The subset is the first -train training and -test test examples, in file
// order: a prefix needs no randomness to reproduce, and Fashion-MNIST's files
// are already shuffled, so a prefix is close to class-balanced.
//
// Run from the dataset directory (go generate does this):
//
//	go run ./internal/mksubset -src /usr/share/datasets/fashion-mnist
//
// It deliberately uses only package idx, not package dataset: dataset embeds
// this command's output and would not build without it.
package main

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/headroom-ml/headroom/idx"
)

// Facts is the content of the facts file. Hashes are of decompressed IDX
// data sections, so that they do not depend on the gzip compressor.
type Facts struct {
	Comment string `json:"comment"`
	// SourceFiles maps each source file name to the SHA-256 of the file as
	// shipped (compressed), identifying exactly which release was used.
	SourceFiles map[string]string `json:"source_files"`
	Full        map[string]Split  `json:"full"`
	Subset      map[string]Split  `json:"subset"`
	// TrainMean and TrainStd are the mean and (population) standard
	// deviation of all training pixels scaled to [0,1], the figures used
	// for Normalize.
	TrainMean float64 `json:"train_mean"`
	TrainStd  float64 `json:"train_std"`
}

// Split describes one split (or its prefix).
type Split struct {
	Count        int     `json:"count"`
	ClassCounts  [10]int `json:"class_counts"`
	PixelSum     uint64  `json:"pixel_sum"`
	ImagesSHA256 string  `json:"images_sha256"`
	LabelsSHA256 string  `json:"labels_sha256"`
}

var prefixes = map[string]string{"train": "train", "test": "t10k"}

func main() {
	src := flag.String("src", "/usr/share/datasets/fashion-mnist", "directory holding the four Fashion-MNIST .gz files")
	out := flag.String("out", "fashionmnist", "directory to write the subset to")
	factsPath := flag.String("facts", "testdata/subset-facts.json", "file to write the facts to")
	nTrain := flag.Int("train", 2000, "training examples to keep")
	nTest := flag.Int("test", 500, "test examples to keep")
	flag.Parse()
	if err := run(*src, *out, *factsPath, map[string]int{"train": *nTrain, "test": *nTest}); err != nil {
		fmt.Fprintln(os.Stderr, "mksubset:", err)
		os.Exit(1)
	}
}

func run(src, out, factsPath string, keep map[string]int) error {
	facts := Facts{
		Comment:     "Written by dataset/internal/mksubset from the Debian package dataset-fashion-mnist; do not edit.",
		SourceFiles: map[string]string{},
		Full:        map[string]Split{},
		Subset:      map[string]Split{},
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, split := range []string{"train", "test"} {
		p := prefixes[split]
		imgName, lblName := p+"-images-idx3-ubyte.gz", p+"-labels-idx1-ubyte.gz"
		images, err := read(filepath.Join(src, imgName), facts.SourceFiles)
		if err != nil {
			return err
		}
		labels, err := read(filepath.Join(src, lblName), facts.SourceFiles)
		if err != nil {
			return err
		}
		if len(images.Dims) != 3 || images.Dims[1] != 28 || images.Dims[2] != 28 || len(labels.Dims) != 1 || images.Dims[0] != labels.Dims[0] {
			return fmt.Errorf("%s: unexpected dims %v / %v", split, images.Dims, labels.Dims)
		}
		n := keep[split]
		if n <= 0 || n > images.Dims[0] {
			return fmt.Errorf("%s: cannot keep %d of %d examples", split, n, images.Dims[0])
		}
		facts.Full[split] = describe(images.Data, labels.Data)
		facts.Subset[split] = describe(images.Data[:n*28*28], labels.Data[:n])
		if split == "train" {
			facts.TrainMean, facts.TrainStd = meanStd(images.Data)
		}
		if err := write(filepath.Join(out, imgName), &idx.File{Type: idx.Uint8, Dims: []int{n, 28, 28}, Data: images.Data[:n*28*28]}); err != nil {
			return err
		}
		if err := write(filepath.Join(out, lblName), &idx.File{Type: idx.Uint8, Dims: []int{n}, Data: labels.Data[:n]}); err != nil {
			return err
		}
	}
	b, err := json.MarshalIndent(facts, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(factsPath, append(b, '\n'), 0o644)
}

// read decodes a ubyte IDX file and records the hash of its bytes.
func read(path string, hashes map[string]string) (*idx.File, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(raw)
	hashes[filepath.Base(path)] = hex.EncodeToString(sum[:])
	f, err := idx.Decode(bytes.NewReader(raw), path)
	if err != nil {
		return nil, err
	}
	if f.Type != idx.Uint8 {
		return nil, fmt.Errorf("%s: %v data, want ubyte", path, f.Type)
	}
	return f, nil
}

func describe(images, labels []byte) Split {
	s := Split{Count: len(labels)}
	for _, l := range labels {
		s.ClassCounts[l]++ // idx accepted the file; labels > 9 would panic here, loudly
	}
	for _, p := range images {
		s.PixelSum += uint64(p)
	}
	hi, hl := sha256.Sum256(images), sha256.Sum256(labels)
	s.ImagesSHA256, s.LabelsSHA256 = hex.EncodeToString(hi[:]), hex.EncodeToString(hl[:])
	return s
}

func meanStd(pix []byte) (mean, std float64) {
	var sum, sq float64
	for _, p := range pix {
		v := float64(p) / 255
		sum += v
		sq += v * v
	}
	n := float64(len(pix))
	mean = sum / n
	return mean, math.Sqrt(sq/n - mean*mean)
}

// write stores f gzip-compressed with a fixed header (no name, no time), so
// that the same Go release always produces the same bytes.
func write(path string, f *idx.File) error {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return err
	}
	if err := idx.Write(zw, f); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}
