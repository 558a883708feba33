package optim_test

import (
	"fmt"
	"log"

	"github.com/headroom-ml/headroom/optim"
)

// Fit w to a target by minimising |w - target|² with AdamW, gradient
// clipping, and a learning rate that warms up linearly for 10 steps and
// then follows a cosine down to zero.
func Example() {
	target := []float32{3, -1}
	w := []float32{0, 0}
	grad := make([]float32, len(w))
	params := []optim.Param{{Name: "w", Value: w, Grad: grad}}

	cfg := optim.AdamWDefaults()
	cfg.LR = 0.1
	opt, err := optim.NewAdamW(cfg)
	if err != nil {
		log.Fatal(err)
	}
	// The memory planner can ask before the first step.
	fmt.Println("state bytes for w:", opt.StateBytesFor(int64(len(w))))

	warm, _ := optim.NewLinearLR(opt, 0.1, 1, 10)
	cos, _ := optim.NewCosineAnnealingLR(opt, 290, 0)
	sched, err := optim.NewSequentialLR(opt, []optim.Scheduler{warm, cos}, []int{10})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("lr at step 0: %.2g\n", sched.LR())

	for step := 0; step < 300; step++ {
		for i := range w {
			grad[i] = 2 * (w[i] - target[i])
		}
		if _, err := optim.ClipGradNorm(params, 1, 2); err != nil {
			log.Fatal(err)
		}
		if err := opt.Step(params); err != nil {
			log.Fatal(err)
		}
		sched.Step()
	}
	fmt.Printf("w = %.1f, lr = %.2g, state bytes: %d\n", w, sched.LR(), opt.StateBytes())
	// Output:
	// state bytes for w: 16
	// lr at step 0: 0.01
	// w = [3.0 -1.0], lr = 0, state bytes: 16
}

func ExampleClipGradNorm() {
	params := []optim.Param{
		{Name: "a", Grad: []float32{3, 0}},
		{Name: "b", Grad: []float32{4}},
		{Name: "frozen"}, // no gradient: ignored
	}
	norm, err := optim.ClipGradNorm(params, 1, 2)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("norm %.1f, clipped %.3f %.3f\n", norm, params[0].Grad, params[1].Grad)
	// Output:
	// norm 5.0, clipped [0.600 0.000] [0.800]
}
