package zoo

import (
	"bytes"
	"testing"
)

// Every model of the zoo has synthetic data of its Example's shapes; a
// sample depends only on its index; labels are spread over the classes;
// a language model's target is its input shifted by one.
func TestSyntheticEveryModel(t *testing.T) {
	for _, s := range Specs() {
		t.Run(s.Name, func(t *testing.T) {
			d, err := NewSynthetic(s, 1)
			if err != nil {
				t.Fatal(err)
			}
			x, y := d.Batch([]int{5, 9, 2, 7})
			wx, wy := s.Example(4)
			if !x.Shape.Equal(wx.Shape) || x.DType != wx.DType || !y.Shape.Equal(wy.Shape) || y.DType != wy.DType {
				t.Fatalf("batch %v %v / %v %v, want %v", x.Shape, x.DType, y.Shape, y.DType, wx)
			}
			x1, y1 := d.Batch([]int{2})
			per, yper := len(x.Data)/4, len(y.Data)/4
			if !bytes.Equal(x1.Data, x.Data[2*per:3*per]) || !bytes.Equal(y1.Data, y.Data[2*yper:3*yper]) {
				t.Error("sample 2 differs between batches")
			}
			switch d.kind {
			case synthClassify:
				idx := make([]int, 64)
				for i := range idx {
					idx[i] = i
				}
				_, y := d.Batch(idx)
				seen := map[int64]bool{}
				for _, l := range y.I64() {
					if l < 0 || l >= int64(d.Classes()) {
						t.Fatalf("label %d of %d classes", l, d.Classes())
					}
					seen[l] = true
				}
				if len(seen) < min(4, d.Classes()) {
					t.Errorf("64 samples take only %d labels", len(seen))
				}
			case synthTokens:
				xv, yv := x.I64(), y.I64()
				T := x.Shape[1]
				for j := 0; j+1 < T; j++ {
					if yv[j] != xv[j+1] {
						t.Fatalf("target %d is %d, next input %d", j, yv[j], xv[j+1])
					}
				}
			}
		})
	}
}
