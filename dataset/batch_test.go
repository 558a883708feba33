package dataset

import (
	"math"
	"slices"
	"strings"
	"testing"
)

// synthetic returns n images whose pixel j of image i is (i*7 + j) mod 256,
// so that every byte value occurs and every position is distinguishable.
func synthetic(n int) *Dataset {
	d := &Dataset{Split: Train, Images: make([]uint8, n*Pixels), Labels: make([]uint8, n)}
	for i := range n {
		for j := range Pixels {
			d.Images[i*Pixels+j] = uint8((i*7 + j) % 256)
		}
		d.Labels[i] = uint8(i % NumClasses)
	}
	return d
}

func TestBatch(t *testing.T) {
	d := synthetic(5)
	indices := []int{4, 0, 4, 2}
	x := make([]float32, len(indices)*Pixels)
	y := make([]int64, len(indices))
	if err := d.Batch(indices, x, y); err != nil {
		t.Fatal(err)
	}
	for k, i := range indices {
		if y[k] != int64(i%NumClasses) {
			t.Errorf("y[%d] = %d, want %d", k, y[k], i%NumClasses)
		}
		for r := range Rows {
			for c := range Cols {
				p := d.Images[i*Pixels+r*Cols+c]
				// NCHW with C = 1: x[k][0][r][c].
				got := x[((k*1+0)*Rows+r)*Cols+c]
				if want := float32(p) / 255; got != want {
					t.Fatalf("x[%d,0,%d,%d] = %v, want %d/255 = %v", k, r, c, got, p, want)
				}
			}
		}
	}
	if slices.Min(x) != 0 || slices.Max(x) != 1 {
		t.Errorf("range [%v, %v], want [0, 1]", slices.Min(x), slices.Max(x))
	}
}

func TestNormalizedBatch(t *testing.T) {
	d := synthetic(2)
	x := make([]float32, 2*Pixels)
	if err := d.NormalizedBatch([]int{0, 1}, x, nil, TrainMean, TrainStd); err != nil {
		t.Fatal(err)
	}
	const m, s = float32(TrainMean), float32(TrainStd)
	for j, p := range d.Images {
		// PyTorch: ToTensor divides by 255 in float32; Normalize then
		// subtracts and divides, in float32.
		want := (float32(p)/255 - m) / s
		if x[j] != want {
			t.Fatalf("pixel %d (value %d): %v, want %v", j, p, x[j], want)
		}
	}
	// Pixel 0 maps to -mean/std, pixel 255 to (1-mean)/std.
	if math.Abs(float64(x[0])+TrainMean/TrainStd) > 1e-6 {
		t.Errorf("x[0] = %v, want %v", x[0], -TrainMean/TrainStd)
	}
}

func TestBatchErrors(t *testing.T) {
	d := synthetic(3)
	tests := []struct {
		name    string
		indices []int
		x       []float32
		y       []int64
		std     float32
		want    string
	}{
		{"short x", []int{0, 1}, make([]float32, Pixels), nil, 1, "needs 1568 floats (2 x 1 x 28 x 28), x has 784"},
		{"long y", []int{0}, nil, make([]int64, 2), 1, "batch of 1 labels, y has 2"},
		{"index too large", []int{0, 3}, nil, make([]int64, 2), 1, "index 3 (batch position 1) out of range for train split of 3 examples"},
		{"negative index", []int{-1}, make([]float32, Pixels), nil, 1, "index -1"},
		{"zero std", []int{0}, nil, nil, 0, "std 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := d.NormalizedBatch(tt.indices, tt.x, tt.y, 0, tt.std)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestTensors(t *testing.T) {
	d := synthetic(4)
	x, y, err := d.Tensors([]int{3, 1}, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := []int(x.Shape); !slices.Equal(got, []int{2, 1, Rows, Cols}) {
		t.Errorf("x shape %v", got)
	}
	if !slices.Equal(y.I64(), []int64{3, 1}) {
		t.Errorf("y = %v", y.I64())
	}
	want := make([]float32, 2*Pixels)
	if err := d.Batch([]int{3, 1}, want, nil); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(x.F32(), want) {
		t.Error("Tensors differs from Batch")
	}
	if _, _, err := d.Tensors([]int{9}, 0, 1); err == nil {
		t.Error("out-of-range index: want error")
	}
	x, y, err = d.Tensors(nil, 0, 1)
	if err != nil || x.Shape.NumElements() != 0 || y.Shape.NumElements() != 0 {
		t.Errorf("empty batch: %v %v %v", x, y, err)
	}
}
