package dataset_test

import (
	"context"
	"fmt"
	"io"

	"github.com/headroom-ml/headroom/dataset"
)

func ExampleLoader() {
	train, err := dataset.Load(dataset.Subset(), dataset.Embedded, dataset.Train)
	if err != nil {
		panic(err)
	}
	l, err := dataset.NewLoader(train, dataset.Config{
		BatchSize: 256, Shuffle: true, Seed: 1, DropLast: true,
		Workers: 4, Depth: 3,
		Transforms: []dataset.Transform{
			dataset.RandomCrop{Height: 28, Width: 28, Padding: 2},
			dataset.HorizontalFlip{},
			dataset.Normalize{Mean: []float32{dataset.TrainMean}, Std: []float32{dataset.TrainStd}},
		},
	})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	m := l.Memory()
	fmt.Printf("staging %d x %d bytes, order %d bytes\n", m.Depth, m.StagingBuffer, m.Shuffle)
	ctx := context.Background()
	for {
		b, err := l.Next(ctx)
		if err == io.EOF {
			break // the end of epoch 0; the next Next starts epoch 1
		}
		if err != nil {
			panic(err)
		}
		_ = b.X // [b.N, 1, 28, 28] float32, valid until the next Next
	}
	fmt.Println("next:", l.State())
	// Output:
	// staging 3 x 804864 bytes, order 16000 bytes
	// next: {1 0}
}
