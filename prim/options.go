package prim

import (
	"fmt"
)

// Reduction is how a loss reduces its per-element values, PyTorch's
// reduction= argument. The zero value ("") means ReductionMean, PyTorch's
// default. It marshals to JSON (and any text encoding) by name.
type Reduction string

// Reductions of a loss.
const (
	ReductionMean Reduction = "mean"
	ReductionSum  Reduction = "sum"
	ReductionNone Reduction = "none"
)

// Valid reports whether r is a reduction a loss accepts ("" included).
func (r Reduction) Valid() bool {
	switch r {
	case "", ReductionMean, ReductionSum, ReductionNone:
		return true
	}
	return false
}

// MarshalText writes the name; the zero value is written as "mean".
func (r Reduction) MarshalText() ([]byte, error) {
	if !r.Valid() {
		return nil, fmt.Errorf("op: %q is not a reduction (want mean, sum or none)", string(r))
	}
	if r == "" {
		r = ReductionMean
	}
	return []byte(r), nil
}

// UnmarshalText reads a name and refuses any other.
func (r *Reduction) UnmarshalText(b []byte) error {
	v := Reduction(b)
	if !v.Valid() {
		return fmt.Errorf("op: %q is not a reduction (want mean, sum or none)", string(b))
	}
	*r = v
	return nil
}
