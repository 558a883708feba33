package memviz

import "testing"

// A PyTorch stack is labelled with its innermost frame outside the
// framework: the user's line, not the torch.nn (or other library, or
// standard library) code it called; a stack of library code only keeps
// its innermost Python frame, one without Python frames the innermost
// frame memory_viz shows.
func TestTopFrameSkipsLibraries(t *testing.T) {
	malloc := Frame{Filename: "/opt/pytorch/c10/cuda/CUDACachingAllocator.cpp", Line: 1104, Name: "malloc"}
	eval := Frame{Filename: "Python/ceval.c", Line: 4181, Name: "_PyEval_EvalFrameDefault"}
	conv := Frame{Filename: "/usr/lib/python3/dist-packages/torch/nn/modules/conv.py", Line: 459, Name: "_conv_forward"}
	call := Frame{Filename: "/home/u/.venv/lib/python3.11/site-packages/torch/nn/modules/module.py", Line: 1501, Name: "_call_impl"}
	hf := Frame{Filename: "/home/u/.venv/lib/python3.11/site-packages/transformers/models/gpt2/modeling_gpt2.py", Line: 300, Name: "forward"}
	src := Frame{Filename: "/src/pytorch/torch/optim/adam.py", Line: 410, Name: "_single_tensor_adam"}
	std := Frame{Filename: "/usr/lib/python3.11/contextlib.py", Line: 81, Name: "inner"}
	frozen := Frame{Filename: "<frozen runpy>", Line: 88, Name: "_run_code"}
	model := Frame{Filename: "/home/u/project/model.py", Line: 42, Name: "forward"}
	lib := Frame{Filename: "/home/u/project/lib/blocks.py", Line: 7, Name: "block"} // a project's own lib/ folder
	for _, c := range []struct {
		name  string
		stack []Frame
		want  Frame
	}{
		{"torch.nn from the user's model", []Frame{malloc, eval, conv, call, model}, model},
		{"a library between", []Frame{malloc, hf, call, std, model}, model},
		{"torch from a source checkout", []Frame{src, frozen, model}, model},
		{"the project's lib folder is the user's", []Frame{conv, lib, model}, lib},
		{"library code only", []Frame{malloc, conv, call}, conv},
		{"no Python", []Frame{eval, malloc}, malloc},
	} {
		got, ok := topFrame(c.stack)
		if !ok || got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
	if _, ok := topFrame(nil); ok {
		t.Error("a frame for an empty stack")
	}
}
