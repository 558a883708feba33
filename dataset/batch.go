package dataset

import (
	"fmt"

	"github.com/headroom-ml/headroom/tensor"
)

// The mean and standard deviation of all training pixels scaled to [0,1],
// computed over the full training split by internal/mksubset (see
// testdata/subset-facts.json), for NormalizedBatch. They are the figures
// commonly quoted for Fashion-MNIST (0.2860, 0.3530).
const (
	TrainMean = 0.2860405969804586
	TrainStd  = 0.3530242445185261
)

// Batch fills x with the images of the given examples as float32 in NCHW
// layout [len(indices), 1, Rows, Cols], each pixel divided by 255 as
// torchvision's ToTensor does, and y with their labels. x must have exactly
// len(indices)*Pixels elements and y len(indices); either may be nil to skip
// it.
func (d *Dataset) Batch(indices []int, x []float32, y []int64) error {
	return d.NormalizedBatch(indices, x, y, 0, 1)
}

// NormalizedBatch is Batch followed by torchvision's Normalize((mean,),
// (std,)): each pixel becomes (p/255 - mean) / std. The arithmetic is
// float32 in the same order as PyTorch's, so batches match its bit for bit.
// Use TrainMean and TrainStd for the usual standardization.
func (d *Dataset) NormalizedBatch(indices []int, x []float32, y []int64, mean, std float32) error {
	n := len(indices)
	if x != nil && len(x) != n*Pixels {
		return fmt.Errorf("dataset: batch of %d images needs %d floats (%d x 1 x %d x %d), x has %d", n, n*Pixels, n, Rows, Cols, len(x))
	}
	if y != nil && len(y) != n {
		return fmt.Errorf("dataset: batch of %d labels, y has %d", n, len(y))
	}
	if std == 0 {
		return fmt.Errorf("dataset: normalization with std 0")
	}
	for k, i := range indices {
		if i < 0 || i >= d.Len() {
			return fmt.Errorf("dataset: index %d (batch position %d) out of range for %s split of %d examples", i, k, d.Split, d.Len())
		}
	}
	if x != nil {
		// 256 possible inputs: convert each once.
		var lut [256]float32
		for p := range lut {
			lut[p] = (float32(p)/255 - mean) / std
		}
		for k, i := range indices {
			dst := x[k*Pixels : (k+1)*Pixels]
			for j, p := range d.Image(i) {
				dst[j] = lut[p]
			}
		}
	}
	if y != nil {
		for k, i := range indices {
			y[k] = int64(d.Labels[i])
		}
	}
	return nil
}

// Tensors returns the batch for the given examples as new host tensors:
// images float32 [len(indices), 1, Rows, Cols] normalized as by
// NormalizedBatch (mean 0, std 1 gives plain ToTensor scaling), and labels
// int64 [len(indices)].
func (d *Dataset) Tensors(indices []int, mean, std float32) (x, y *tensor.Tensor, err error) {
	n := len(indices)
	x = tensor.New(tensor.Float32, tensor.Shape{n, 1, Rows, Cols})
	y = tensor.New(tensor.Int64, tensor.Shape{n})
	// For n == 0 the views are nil, which NormalizedBatch reads as "skip":
	// there is nothing to fill anyway.
	if err := d.NormalizedBatch(indices, x.F32(), y.I64(), mean, std); err != nil {
		return nil, nil, err
	}
	return x, y, nil
}
