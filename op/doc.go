// Package op is the functional API model code calls (op.MatMul, op.ReLU,
// op.Conv2d, op.CrossEntropy, ...): each function checks its arguments
// the way PyTorch's does and records nodes of package prim, where the node
// types live with their shape inference, reverse-mode rules, traits and
// registry. The option structs model code passes (ConvOpts, PoolOpts,
// CrossEntropyOpts, Reduction, Class) are prim's, re-exported here.
package op
