package transform

import (
	"testing"

	"github.com/headroom-ml/headroom/tensor"
)

func TestLoadPattern(t *testing.T) {
	for _, c := range []struct {
		in, out     tensor.Shape
		inner, mid  int
		unsupported bool
	}{
		{in: tensor.Shape{4, 5}, out: tensor.Shape{4, 5}, inner: 1, mid: 20},          // element for element
		{in: tensor.Shape{5}, out: tensor.Shape{4, 5}, inner: 1, mid: 5},              // a bias over rows
		{in: tensor.Shape{1, 5}, out: tensor.Shape{2, 4, 5}, inner: 1, mid: 5},        // with a leading 1
		{in: tensor.Shape{3, 1, 1}, out: tensor.Shape{2, 3, 4, 4}, inner: 16, mid: 3}, // a channel bias
		{in: tensor.Shape{}, out: tensor.Shape{2, 3}, inner: 6, mid: 1},               // a scalar
		{in: tensor.Shape{1, 1}, out: tensor.Shape{2, 3}, inner: 6, mid: 1},
		{in: tensor.Shape{3, 1, 5}, out: tensor.Shape{2, 3, 1, 5}, inner: 1, mid: 15}, // size-1 axes do not break a run
		{in: tensor.Shape{2, 1, 4}, out: tensor.Shape{2, 3, 4}, unsupported: true},    // kept axes 0 and 2
		{in: tensor.Shape{3}, out: tensor.Shape{2, 5}, unsupported: true},             // does not broadcast
		{in: tensor.Shape{2, 2, 3}, out: tensor.Shape{2, 3}, unsupported: true},       // larger than the output
	} {
		inner, mid, ok := loadPattern(c.in, c.out)
		if ok == c.unsupported || ok && (inner != c.inner || mid != c.mid) {
			t.Errorf("loadPattern(%v, %v) = %d, %d, %v; want %d, %d, %v", c.in, c.out, inner, mid, ok, c.inner, c.mid, !c.unsupported)
		}
	}
}
