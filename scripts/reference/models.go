// Package reference embeds the PyTorch model definitions that the zoo's
// parity tests are checked against, for the benchmark's PyTorch side
// (scripts/bench), which runs them from a temporary directory.
package reference

import _ "embed"

// TorchModelsName is the file name the benchmark script imports.
const TorchModelsName = "torch_models.py"

// TorchModels is torch_models.py.
//
//go:embed torch_models.py
var TorchModels string
