package optim_test

import (
	"testing"

	"github.com/headroom-ml/headroom/optim"
)

// Every optimizer takes all of its state from the function given to
// SetAlloc, so an engine can count it: after a step, the bytes handed out
// equal StateBytes and StateBytesFor.
func TestEveryOptimizerAllocatesThroughSetAlloc(t *testing.T) {
	sgd, _ := optim.NewSGD(optim.SGDConfig{LR: 0.1, Momentum: 0.9})
	adam, _ := optim.NewAdam(optim.AdamDefaults())
	adamw, _ := optim.NewAdamW(optim.AdamWDefaults())
	amsgrad := optim.AdamDefaults()
	amsgrad.AMSGrad = true
	ams, _ := optim.NewAdam(amsgrad)
	for name, o := range map[string]optim.Optimizer{"sgd momentum": sgd, "adam": adam, "adamw": adamw, "amsgrad": ams} {
		var handed int64
		o.SetAlloc(func(param, buffer string, n int) ([]float32, error) {
			handed += int64(n) * 4
			return make([]float32, n), nil
		})
		p := optim.Param{Name: "w", Value: make([]float32, 10), Grad: make([]float32, 10)}
		for i := range p.Grad {
			p.Grad[i] = float32(i)
		}
		if err := o.Step([]optim.Param{p}); err != nil {
			t.Fatal(err)
		}
		if handed == 0 || handed != o.StateBytes() || handed != o.StateBytesFor(10) {
			t.Errorf("%s: %d bytes from SetAlloc's function, StateBytes %d, StateBytesFor %d", name, handed, o.StateBytes(), o.StateBytesFor(10))
		}
	}
}
