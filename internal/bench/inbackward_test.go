package bench

import (
	"context"
	"testing"
)

// --optimizer-in-backward frees the gradient buffers: the planned training
// memory falls by the parameters' bytes (Adam keeps its state either way),
// the loss stays the same, and the result says the mode was used.
func TestRunHeadroomInBackward(t *testing.T) {
	w, err := Lookup("mlp")
	if err != nil {
		t.Fatal(err)
	}
	run := func(in bool) Result {
		t.Helper()
		r, err := RunHeadroom(context.Background(), w, Options{Warmup: 0, Steps: 2, Threads: 1, Seed: 1, InBackward: in})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	base, in := run(false), run(true)
	if base.InBackward || !in.InBackward {
		t.Fatalf("InBackward: %v without the option, %v with it", base.InBackward, in.InBackward)
	}
	if in.Planned >= base.Planned {
		t.Errorf("planned %d bytes in backward, not below %d with gradient buffers", in.Planned, base.Planned)
	}
	if in.Loss != base.Loss {
		t.Errorf("last loss %v in backward, %v with gradient buffers", in.Loss, base.Loss)
	}
}
