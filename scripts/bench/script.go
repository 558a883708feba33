// Package benchscript holds the PyTorch side of `headroom bench
// --compare-pytorch`, embedded so that the binary runs it from any
// directory: bench writes it, with the model definitions it imports
// (scripts/reference/torch_models.py), to a temporary directory.
package benchscript

import _ "embed"

// Name is the script's file name.
const Name = "pytorch_bench.py"

// Script is pytorch_bench.py.
//
//go:embed pytorch_bench.py
var Script string
