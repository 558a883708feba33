package train_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/optim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
)

// logNet takes the log of a linear layer's output: negative outputs give NaN
// in module "head.act".
type logNet struct{ fc1, fc2 *nn.Linear }

func (m *logNet) Forward(x *trace.Tensor) *trace.Tensor {
	h := m.fc1.Forward(x)
	x.Graph().WithModule("head", func() {
		x.Graph().WithModule("act", func() { h = op.Log(h) })
	})
	return m.fc2.Forward(h)
}

func TestNonFiniteLossNamesTheFirstBadTensor(t *testing.T) {
	opt, _ := optim.NewSGD(optim.SGDConfig{LR: 0.1})
	tr, err := train.Setup(device.CPU(), 1, func(s *nn.Store) (train.Model, train.LossFunc) {
		m := &logNet{fc1: nn.NewLinear(s.Root().Sub("fc1"), 4, 4, true), fc2: nn.NewLinear(s.Root().Sub("fc2"), 4, 2, true)}
		return m, sse
	}, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	before := append([]float32(nil), tr.Store.Trainable()[0].Value.F32()...)
	x := tensor.FromFloat32(tensor.Shape{2, 4}, []float32{1, -2, 3, -4, 5, -6, 7, -8})
	y := tensor.New(tensor.Float32, tensor.Shape{2, 2})
	_, err = tr.Step(context.Background(), x, y)
	var nf *train.NonFiniteError
	if !errors.As(err, &nf) || nf.First == nil {
		t.Fatalf("want a NonFiniteError naming the tensor, got %v", err)
	}
	if nf.First.Node.Module != "head.act" || nf.First.Node.Op.Name() != "log" || !strings.Contains(err.Error(), "module head.act") {
		t.Fatalf("got %v", err)
	}
	if relErr(tr.Store.Trainable()[0].Value.F32(), before) != 0 {
		t.Fatal("the weights changed in a step with a non-finite loss")
	}
}
