package dataset_test

import (
	"fmt"

	"github.com/headroom-ml/headroom/dataset"
)

func Example() {
	// The embedded subset works anywhere; dataset.Open() would prefer the
	// full dataset when the Debian package is installed.
	train, err := dataset.Load(dataset.Subset(), dataset.Embedded, dataset.Train)
	if err != nil {
		panic(err)
	}
	s := dataset.Sampler{N: train.Len(), BatchSize: 512, Shuffle: true, Seed: 1}
	x := make([]float32, s.BatchSize*dataset.Pixels)
	y := make([]int64, s.BatchSize)
	for batch := range s.Epoch(0) {
		n := len(batch) // the last batch is shorter unless DropLast is set
		if err := train.Batch(batch, x[:n*dataset.Pixels], y[:n]); err != nil {
			panic(err)
		}
		fmt.Printf("batch of %d: x [%d 1 28 28], first label %s\n", n, n, dataset.Classes[y[0]])
	}
	// Output:
	// batch of 512: x [512 1 28 28], first label Ankle boot
	// batch of 512: x [512 1 28 28], first label Sneaker
	// batch of 512: x [512 1 28 28], first label Sandal
	// batch of 464: x [464 1 28 28], first label Ankle boot
}
