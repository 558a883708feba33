// Package prim holds the primitives of the graph IR: every node type
// (shape inference, reverse-mode rule), the traits and cost each declares
// for the passes, the registry of them, the geometry helpers kernels share
// and the one-node emitters reverse-mode rules and passes build nodes with.
// Model code calls package op, the functional API over these nodes.
package prim
