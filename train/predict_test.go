package train_test

import (
	"context"
	"math"
	"math/rand"
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/transform"
)

// Predict runs in the trainer's precision: under bf16-mixed the last
// linear layer's output (an addmm) is rounded to bfloat16, under fp32 it is
// not, and the two agree to bfloat16's precision.
func TestPredictUsesPrecision(t *testing.T) {
	x, _ := batch(rand.New(rand.NewSource(2)), 16)
	outs := map[transform.Precision]*tensor.Tensor{}
	for _, p := range []transform.Precision{transform.FP32, transform.BF16Mixed} {
		tr := newTrainer(t, device.CPU())
		setPrecision(t, tr, p)
		out, err := tr.Predict(context.Background(), x)
		if err != nil {
			t.Fatal(err)
		}
		outs[p] = out.Convert(tensor.Float32)
		tr.Close()
	}
	isBF16 := func(v float32) bool {
		return tensor.BFloat16ToFloat32(tensor.Float32ToBFloat16(v)) == v
	}
	notBF16 := 0
	for i, v := range outs[transform.BF16Mixed].F32() {
		ref := outs[transform.FP32].F32()[i]
		if !isBF16(v) {
			t.Fatalf("bf16-mixed output %d = %v is not a bfloat16 number", i, v)
		}
		if !isBF16(ref) {
			notBF16++
		}
		if d := math.Abs(float64(v - ref)); d > 0.02*math.Abs(float64(ref))+0.02 {
			t.Errorf("output %d: bf16-mixed %v, fp32 %v", i, v, ref)
		}
	}
	if notBF16 == 0 {
		t.Error("every fp32 output is a bfloat16 number: the test cannot tell the precisions apart")
	}
}
