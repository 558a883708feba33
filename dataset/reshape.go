package dataset

import (
	"fmt"
	"slices"
)

// Reshape gives each sample the shape Shape, keeping its values in order
// (torch.reshape): a row of 784 features or an IDX image [28 28] becomes a
// model's [1 28 28]. The element counts must agree.
type Reshape struct{ Shape []int }

func (t Reshape) OutShape(in []int) ([]int, error) {
	if numel(in) != numel(t.Shape) {
		return nil, fmt.Errorf("dataset: cannot reshape samples of shape %v (%d values) to %v (%d values)", in, numel(in), t.Shape, numel(t.Shape))
	}
	return slices.Clone(t.Shape), nil
}

func (t Reshape) Apply(_ *Rand, ex *Example, _ *[]float32) { ex.setShape(t.Shape...) }

// RepeatChannels turns a one-channel CHW image into N channels, each a
// copy (torchvision's Grayscale(num_output_channels=3) on a grey image):
// a grey dataset for a model of RGB images.
type RepeatChannels struct{ N int }

func (t RepeatChannels) OutShape(in []int) ([]int, error) {
	if len(in) != 3 || in[0] != 1 || t.N < 1 {
		return nil, fmt.Errorf("dataset: RepeatChannels{%d} takes one-channel CHW images, not %v", t.N, in)
	}
	return []int{t.N, in[1], in[2]}, nil
}

func (t RepeatChannels) Apply(_ *Rand, ex *Example, scratch *[]float32) {
	plane := len(ex.X)
	out := grow(*scratch, t.N*plane)
	for c := range t.N {
		copy(out[c*plane:], ex.X)
	}
	*scratch, ex.X = ex.X, out
	ex.setShape(t.N, ex.Shape[1], ex.Shape[2])
}

func numel(s []int) int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}
