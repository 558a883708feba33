// Command loaderbench makes one pass of headroom's data loader over an
// image folder with the transforms of torch_loader.py (Resize to 256x256,
// bilinear; RandomCrop 224; HorizontalFlip; Normalize) and prints one JSON
// line: images, seconds, images/s, and the staging bytes. bench.py runs
// it next to PyTorch's DataLoader. The staging buffers come from the cpu
// device's allocator (category input), as headroom train's do: mapped
// outside the Go heap, allocated once.
//
//	go run ./scripts/data/loaderbench -data DIR [-workers 2] [-batch 32] [-epochs 1]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/headroom-ml/headroom/dataset"
	"github.com/headroom-ml/headroom/device"
)

func main() {
	data := flag.String("data", "", "image folder")
	workers := flag.Int("workers", 2, "decode workers")
	batch := flag.Int("batch", 32, "batch size")
	epochs := flag.Int("epochs", 1, "passes")
	depth := flag.Int("depth", 3, "staging buffers")
	flag.Parse()
	if err := run(*data, *workers, *batch, *epochs, *depth); err != nil {
		fmt.Fprintln(os.Stderr, "loaderbench:", err)
		os.Exit(1)
	}
}

func run(data string, workers, batch, epochs, depth int) error {
	src, err := dataset.OpenImageFolder(data, 3)
	if err != nil {
		return err
	}
	dev, err := device.New("cpu")
	if err != nil {
		return err
	}
	alloc := func(what string, n int64) ([]byte, func(), error) {
		b, err := dev.Alloc.Allocate(n, device.Tag{Category: device.Input, Module: "data", Op: what})
		if err != nil {
			return nil, nil, err
		}
		return b.Data[:n:n], func() { dev.Alloc.Free(b) }, nil
	}
	l, err := dataset.NewLoader(src, dataset.Config{BatchSize: batch, Shuffle: true, Seed: 1, Workers: workers, Depth: depth, Alloc: alloc,
		Transforms: []dataset.Transform{
			dataset.Resize{Height: 256, Width: 256},
			dataset.RandomCrop{Height: 224, Width: 224},
			dataset.HorizontalFlip{},
			dataset.Normalize{Mean: []float32{0.485, 0.456, 0.406}, Std: []float32{0.229, 0.224, 0.225}},
		}})
	if err != nil {
		return err
	}
	defer l.Close()
	n := 0
	start := time.Now()
	for e := 0; e < epochs; {
		b, err := l.Next(context.Background())
		if errors.Is(err, io.EOF) {
			e++
			continue
		}
		if err != nil {
			return err
		}
		n += b.N
	}
	s := time.Since(start).Seconds()
	staging := dev.Alloc.Stats().ByCategory[device.Input]
	return json.NewEncoder(os.Stdout).Encode(map[string]any{"loader": "headroom", "images": n, "seconds": s, "images_per_s": float64(n) / s,
		"staging_bytes": staging, "memory": l.Memory()})
}
