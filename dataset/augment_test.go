package dataset

import (
	"math"
	"slices"
	"testing"
)

func seq(n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(i)
	}
	return x
}

func TestResizeBilinear(t *testing.T) {
	// torch.nn.functional.interpolate(torch.tensor([[[[0., 1], [2, 3]]]]),
	// size=(4, 4), mode="bilinear", align_corners=False).
	want := []float32{
		0, 0.25, 0.75, 1,
		0.5, 0.75, 1.25, 1.5,
		1.5, 1.75, 2.25, 2.5,
		2, 2.25, 2.75, 3,
	}
	ex := &Example{X: seq(4), Shape: []int{1, 2, 2}}
	var scratch []float32
	Resize{Height: 4, Width: 4}.Apply(nil, ex, &scratch)
	if !slices.Equal(ex.X, want) || !slices.Equal(ex.Shape, []int{1, 4, 4}) {
		t.Errorf("2x2 -> 4x4: %v shape %v", ex.X, ex.Shape)
	}
	// Halving averages pairs (no antialiasing beyond that): rows 0-1, 2-3.
	ex = &Example{X: seq(32), Shape: []int{2, 4, 4}}
	Resize{Height: 2, Width: 2}.Apply(nil, ex, &scratch)
	if want := []float32{2.5, 4.5, 10.5, 12.5, 18.5, 20.5, 26.5, 28.5}; !slices.Equal(ex.X, want) {
		t.Errorf("4x4 -> 2x2: %v, want %v", ex.X, want)
	}
	// Same size is the identity.
	ex = &Example{X: seq(6), Shape: []int{1, 2, 3}}
	Resize{Height: 2, Width: 3}.Apply(nil, ex, &scratch)
	if !slices.Equal(ex.X, seq(6)) {
		t.Errorf("identity resize: %v", ex.X)
	}
}

func TestRandomCrop(t *testing.T) {
	// Without padding a full-size crop is the identity; with padding every
	// crop is a shifted window with zeros brought in, and all shifts occur.
	seen := map[[2]int]bool{}
	var scratch []float32
	for id := range 200 {
		r := sampleRand(1, 0, id)
		ex := &Example{X: seq(2 * 3 * 3), Shape: []int{2, 3, 3}}
		RandomCrop{Height: 3, Width: 3, Padding: 1}.Apply(&r, ex, &scratch)
		if !slices.Equal(ex.Shape, []int{2, 3, 3}) {
			t.Fatalf("shape %v", ex.Shape)
		}
		// Find the shift (dy, dx) that explains the output.
		found := false
		for dy := -1; dy <= 1 && !found; dy++ {
			for dx := -1; dx <= 1 && !found; dx++ {
				ok := true
				for c := range 2 {
					for y := range 3 {
						for x := range 3 {
							sy, sx := y+dy, x+dx
							want := float32(0)
							if sy >= 0 && sy < 3 && sx >= 0 && sx < 3 {
								want = float32(c*9 + sy*3 + sx)
							}
							ok = ok && ex.X[c*9+y*3+x] == want
						}
					}
				}
				if ok {
					found = true
					seen[[2]int{dy, dx}] = true
				}
			}
		}
		if !found {
			t.Fatalf("crop %v is no shifted window", ex.X)
		}
	}
	if len(seen) != 9 {
		t.Errorf("%d of the 9 shifts occurred", len(seen))
	}
	if _, err := (RandomCrop{Height: 5, Width: 5, Padding: 1}).OutShape([]int{1, 2, 2}); err == nil {
		t.Error("a 5x5 crop of a padded 4x4 accepted")
	}
	if _, err := (RandomCrop{Height: 1, Width: 1}).OutShape([]int{4}); err == nil {
		t.Error("a crop of a vector accepted")
	}
}

func TestHorizontalFlip(t *testing.T) {
	flipped := 0
	for id := range 100 {
		r := sampleRand(2, 1, id)
		ex := &Example{X: seq(12), Shape: []int{2, 2, 3}}
		HorizontalFlip{}.Apply(&r, ex, nil)
		switch {
		case slices.Equal(ex.X, seq(12)):
		case slices.Equal(ex.X, []float32{2, 1, 0, 5, 4, 3, 8, 7, 6, 11, 10, 9}):
			flipped++
		default:
			t.Fatalf("flip gave %v", ex.X)
		}
	}
	if flipped < 30 || flipped > 70 {
		t.Errorf("%d of 100 flipped at p=0.5", flipped)
	}
	r := sampleRand(2, 1, 0)
	ex := &Example{X: seq(3), Shape: []int{1, 1, 3}}
	HorizontalFlip{P: 1}.Apply(&r, ex, nil)
	if !slices.Equal(ex.X, []float32{2, 1, 0}) {
		t.Errorf("p=1: %v", ex.X)
	}
}

func TestNormalize(t *testing.T) {
	ex := &Example{X: []float32{0, 1, 0.5, 0.25}, Shape: []int{2, 1, 2}}
	n := Normalize{Mean: []float32{0.5, 0.25}, Std: []float32{0.5, 0.25}}
	if _, err := n.OutShape(ex.Shape); err != nil {
		t.Fatal(err)
	}
	n.Apply(nil, ex, nil)
	if !slices.Equal(ex.X, []float32{-1, 1, 1, 0}) {
		t.Errorf("%v", ex.X)
	}
	// Bit for bit the float32 arithmetic of (x - m) / s.
	x := float32(0.7)
	ex = &Example{X: []float32{x}, Shape: []int{1}}
	Normalize{Mean: []float32{TrainMean}, Std: []float32{TrainStd}}.Apply(nil, ex, nil)
	if want := (x - float32(TrainMean)) / float32(TrainStd); ex.X[0] != want {
		t.Errorf("%v, want %v", ex.X[0], want)
	}
	for _, bad := range []Normalize{{Mean: []float32{1, 2, 3}, Std: []float32{1, 1, 1}}, {Mean: []float32{1}, Std: []float32{0}}, {Mean: []float32{1}}, {Mean: []float32{0}, Std: []float32{float32(math.NaN())}}} {
		if _, err := bad.OutShape([]int{2, 1, 1}); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// The generator is fixed: these values must never change, or every
// augmented run changes with them.
func TestSampleRandFixed(t *testing.T) {
	r := sampleRand(1, 2, 3)
	a, b := r.Uint64(), r.Uint64()
	if a != 0xe69a877de1d3cb59 || b != 0xabeb485ccea1c1ef {
		t.Errorf("sampleRand(1, 2, 3) starts %#x %#x; the augmentation streams changed", a, b)
	}
	r2 := sampleRand(1, 2, 3)
	if a2 := r2.Uint64(); a2 != a {
		t.Fatal("same seed, different values")
	}
	r3 := sampleRand(1, 2, 4)
	if r3.Uint64() == a {
		t.Error("neighbouring samples share a stream")
	}
	if a == b {
		t.Error("the generator repeats")
	}
	for range 1000 {
		if f := r.Float64(); f < 0 || f >= 1 {
			t.Fatalf("Float64 %v", f)
		}
		if n := r.Intn(7); n < 0 || n >= 7 {
			t.Fatalf("Intn(7) = %d", n)
		}
	}
}
