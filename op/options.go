package op

import (
	"fmt"
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
