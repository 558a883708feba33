package dataset

import (
	"slices"
	"testing"
)

func TestReshapeAndRepeatChannels(t *testing.T) {
	for _, c := range []struct {
		name    string
		tr      Transform
		in      []int
		x       []float32
		shape   []int
		want    []float32
		badOpen bool
	}{
		{"flat to CHW", Reshape{Shape: []int{1, 2, 3}}, []int{6}, []float32{1, 2, 3, 4, 5, 6}, []int{1, 2, 3}, []float32{1, 2, 3, 4, 5, 6}, false},
		{"count differs", Reshape{Shape: []int{1, 2, 3}}, []int{5}, nil, nil, nil, true},
		{"grey to RGB", RepeatChannels{N: 3}, []int{1, 1, 2}, []float32{7, 8}, []int{3, 1, 2}, []float32{7, 8, 7, 8, 7, 8}, false},
		{"not grey", RepeatChannels{N: 3}, []int{2, 1, 2}, nil, nil, nil, true},
		{"not CHW", RepeatChannels{N: 3}, []int{1, 2}, nil, nil, nil, true},
	} {
		out, err := c.tr.OutShape(c.in)
		if c.badOpen {
			if err == nil {
				t.Errorf("%s: OutShape(%v) = %v, want an error", c.name, c.in, out)
			}
			continue
		}
		if err != nil || !slices.Equal(out, c.shape) {
			t.Errorf("%s: OutShape = %v, %v", c.name, out, err)
		}
		ex := &Example{X: slices.Clone(c.x)}
		ex.setShape(c.in...)
		var scratch []float32
		c.tr.Apply(nil, ex, &scratch)
		if !slices.Equal(ex.X, c.want) || !slices.Equal(ex.Shape, c.shape) {
			t.Errorf("%s: %v %v, want %v %v", c.name, ex.X, ex.Shape, c.want, c.shape)
		}
	}
}
