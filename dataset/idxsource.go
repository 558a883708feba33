package dataset

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/headroom-ml/headroom/idx"
)

// Get makes a Fashion-MNIST split a MapSource: example i as float32
// [1, Rows, Cols] scaled to [0,1] (as Batch gives it) and its label.
func (d *Dataset) Get(i int, ex *Example) error {
	x := ex.growX(Pixels)
	for j, p := range d.Image(i) {
		x[j] = float32(p) / 255
	}
	ex.setShape(1, Rows, Cols)
	ex.Y = append(ex.Y[:0], int64(d.Labels[i]))
	ex.Tokens = ex.Tokens[:0]
	return nil
}

// IDX is a map-style source over a pair of decoded IDX files: samples (the
// first dimension indexes them; the rest is each sample's shape) and their
// integer labels. ubyte samples are scaled to [0,1] as images; other types
// are read as their values.
type IDX struct {
	Samples, Labels *idx.File
	labels          []int64
	shape           []int
	size            int // elements per sample
}

// NewIDX checks that the files agree and returns the source.
func NewIDX(samples, labels *idx.File) (*IDX, error) {
	if len(samples.Dims) < 1 || len(labels.Dims) != 1 {
		return nil, fmt.Errorf("dataset: idx: samples %s are %v, labels %s are %v; want [n ...] and [n]", samples.Name, samples.Dims, labels.Name, labels.Dims)
	}
	if samples.Dims[0] != labels.Dims[0] {
		return nil, fmt.Errorf("dataset: idx: %s holds %d samples but %s holds %d labels", samples.Name, samples.Dims[0], labels.Name, labels.Dims[0])
	}
	lab, err := labels.Int64s()
	if err != nil {
		return nil, fmt.Errorf("dataset: idx: %w", err)
	}
	s := &IDX{Samples: samples, Labels: labels, labels: lab, shape: samples.Dims[1:], size: 1}
	for _, d := range s.shape {
		s.size *= d
	}
	return s, nil
}

// Len is the number of samples.
func (s *IDX) Len() int { return len(s.labels) }

// Get converts sample i.
func (s *IDX) Get(i int, ex *Example) error {
	n := s.size
	x := ex.growX(n)
	es := s.Samples.Type.Size()
	raw := s.Samples.Data[i*n*es : (i+1)*n*es]
	be := binary.BigEndian
	for j := range x {
		switch s.Samples.Type {
		case idx.Uint8:
			x[j] = float32(raw[j]) / 255
		case idx.Int8:
			x[j] = float32(int8(raw[j]))
		case idx.Int16:
			x[j] = float32(int16(be.Uint16(raw[2*j:])))
		case idx.Int32:
			x[j] = float32(int32(be.Uint32(raw[4*j:])))
		case idx.Float32:
			x[j] = math.Float32frombits(be.Uint32(raw[4*j:]))
		case idx.Float64:
			x[j] = float32(math.Float64frombits(be.Uint64(raw[8*j:])))
		}
	}
	ex.setShape(s.shape...)
	ex.Y = append(ex.Y[:0], s.labels[i])
	ex.Tokens = ex.Tokens[:0]
	return nil
}
