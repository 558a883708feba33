// Package testkit holds what the tests of several packages (and the
// measurement tool cmd/fitreport) used to copy: reproducible random batches
// and the setup of a trainer for a zoo model.
//
// The draws are part of the contract: tests compare against values recorded
// from these streams, so Fill draws exactly what the copies it replaces drew
// (one draw per element, in order, inputs before targets).
package testkit

import (
	"math/rand"
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// Fill returns a tensor of m's type and shape valid as a model input or
// target: int64 elements (token ids, class indices) are r.Intn(bound),
// float32 elements r.NormFloat64(); other types stay zero.
func Fill(r *rand.Rand, m trace.Meta, bound int) *tensor.Tensor {
	t := tensor.New(m.DType, m.Shape)
	switch m.DType {
	case tensor.Int64:
		for i := range t.I64() {
			t.I64()[i] = int64(r.Intn(bound))
		}
	case tensor.Float32:
		for i := range t.F32() {
			t.F32()[i] = float32(r.NormFloat64())
		}
	}
	return t
}

// Batch is Fill of the input x, then of the target y, from one stream.
func Batch(r *rand.Rand, x, y trace.Meta, bound int) (*tensor.Tensor, *tensor.Tensor) {
	xt := Fill(r, x, bound)
	return xt, Fill(r, y, bound)
}

// SpecBatch is a reproducible batch of n examples for spec: Batch with
// bound 10 over spec.Example(n), from a stream seeded with seed.
func SpecBatch(spec zoo.Spec, n int, seed int64) (*tensor.Tensor, *tensor.Tensor) {
	xm, ym := spec.Example(n)
	return Batch(rand.New(rand.NewSource(seed)), xm, ym, 10)
}

// Build is the model builder train.Setup takes, for a zoo model.
func Build(spec zoo.Spec) func(*nn.Store) (train.Model, train.LossFunc) {
	return func(s *nn.Store) (train.Model, train.LossFunc) { return spec.New(s.Root()), spec.Loss }
}

// Trainer is train.Setup that fails the test on error. Closing the trainer
// releases its store.
func Trainer(t testing.TB, dev *device.Device, seed int64, build func(*nn.Store) (train.Model, train.LossFunc), opt optim.Optimizer) *train.Trainer {
	t.Helper()
	tr, err := train.Setup(dev, seed, build, opt)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// Classification is a batch for a classifier: normal float32 inputs of
// shape x, then one class index below classes per example (x[0] of them).
func Classification(r *rand.Rand, x tensor.Shape, classes int) (*tensor.Tensor, *tensor.Tensor) {
	return Batch(r, trace.Meta{DType: tensor.Float32, Shape: x}, trace.Meta{DType: tensor.Int64, Shape: tensor.Shape{x[0]}}, classes)
}
