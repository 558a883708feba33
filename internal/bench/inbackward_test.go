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

// By default headroom's gradients are arena values (as PyTorch's, set to
// none before each step): the planned training memory is below the step's
// with gradient buffers, the allocator measures what was planned either
// way, the losses are the same, and the result says which ran.
func TestRunHeadroomArenaGradients(t *testing.T) {
	w, err := Lookup("mlp")
	if err != nil {
		t.Fatal(err)
	}
	run := func(buffers bool) Result {
		t.Helper()
		r, err := RunHeadroom(context.Background(), w, Options{Warmup: 0, Steps: 2, Threads: 1, Seed: 1, GradientBuffers: buffers})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	arena, bufs := run(false), run(true)
	if !arena.ArenaGradients || bufs.ArenaGradients {
		t.Fatalf("ArenaGradients: %v by default, %v with gradient buffers", arena.ArenaGradients, bufs.ArenaGradients)
	}
	if arena.Planned >= bufs.Planned {
		t.Errorf("planned %d bytes with arena gradients, not below %d with gradient buffers", arena.Planned, bufs.Planned)
	}
	for _, r := range []Result{arena, bufs} {
		if r.Allocated != r.Planned {
			t.Errorf("arena gradients %v: allocated %d, planned %d", r.ArenaGradients, r.Allocated, r.Planned)
		}
	}
	if arena.Loss != bufs.Loss {
		t.Errorf("last loss %v with arena gradients, %v with gradient buffers", arena.Loss, bufs.Loss)
	}
}
