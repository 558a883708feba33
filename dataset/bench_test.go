package dataset

import (
	"fmt"
	"io"
	"path/filepath"
	"testing"
)

// BenchmarkLoaderImageFolder decodes and augments 32x32 PNGs from an image
// folder (CIFAR-sized), reporting images per second.
func BenchmarkLoaderImageFolder(b *testing.B) {
	root := b.TempDir()
	const n = 512
	for i := range n {
		writeFile(b, filepath.Join(root, fmt.Sprint(i%10), fmt.Sprintf("%04d.png", i)), encodePNG(b, testImage(32, 32, uint8(i))))
	}
	f, err := OpenImageFolder(root, 3)
	if err != nil {
		b.Fatal(err)
	}
	for _, workers := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			l, err := NewLoader(f, Config{BatchSize: 64, Shuffle: true, Workers: workers, Depth: 3, Transforms: []Transform{
				RandomCrop{Height: 32, Width: 32, Padding: 4}, HorizontalFlip{},
				Normalize{Mean: []float32{0.49, 0.48, 0.45}, Std: []float32{0.25, 0.24, 0.26}},
			}})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			images := 0
			b.ResetTimer()
			for b.Loop() {
				bt, err := l.Next(b.Context())
				if err == io.EOF {
					continue
				}
				if err != nil {
					b.Fatal(err)
				}
				images += bt.N
			}
			b.ReportMetric(float64(images)/b.Elapsed().Seconds(), "images/s")
		})
	}
}
