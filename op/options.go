package op

import (
	"fmt"

	"github.com/headroom-ml/headroom/prim"
)

// The options model code passes are the structs the nodes carry, declared
// in prim; op re-exports them so model code names only op.
type (
	// ConvOpts are Conv2d's options (prim.ConvOpts).
	ConvOpts = prim.ConvOpts
	// PoolOpts are the pooling options (prim.PoolOpts).
	PoolOpts = prim.PoolOpts
	// CrossEntropyOpts are CrossEntropy's options (prim.CrossEntropyOpts).
	CrossEntropyOpts = prim.CrossEntropyOpts
	// ClassIndex is an optional class index (prim.ClassIndex); see Class.
	ClassIndex = prim.ClassIndex
	// Reduction is how a loss reduces its per-element values
	// (prim.Reduction).
	Reduction = prim.Reduction
)

// DefaultIgnoreIndex is PyTorch's ignore_index default, the class an unset
// CrossEntropyOpts.IgnoreIndex stands for.
const DefaultIgnoreIndex = prim.DefaultIgnoreIndex

// Reductions of a loss.
const (
	ReductionMean = prim.ReductionMean
	ReductionSum  = prim.ReductionSum
	ReductionNone = prim.ReductionNone
)

// Approximate is GELU's approximation, PyTorch's approximate= argument.
// The zero value ("") means GELUExact, PyTorch's default. It marshals by
// name.
type Approximate string

// GELU approximations.
const (
	// GELUExact is x*Φ(x) with the error function (approximate='none').
	GELUExact Approximate = "none"
	// GELUTanh is the tanh approximation (approximate='tanh').
	GELUTanh Approximate = "tanh"
)

// Valid reports whether a is an approximation GELU accepts ("" included).
func (a Approximate) Valid() bool {
	switch a {
	case "", GELUExact, GELUTanh:
		return true
	}
	return false
}

// MarshalText writes the name; the zero value is written as "none".
func (a Approximate) MarshalText() ([]byte, error) {
	if !a.Valid() {
		return nil, fmt.Errorf("op: %q is not a GELU approximation (want none or tanh)", string(a))
	}
	if a == "" {
		a = GELUExact
	}
	return []byte(a), nil
}

// UnmarshalText reads a name and refuses any other.
func (a *Approximate) UnmarshalText(b []byte) error {
	v := Approximate(b)
	if !v.Valid() {
		return fmt.Errorf("op: %q is not a GELU approximation (want none or tanh)", string(b))
	}
	*a = v
	return nil
}
