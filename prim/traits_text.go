package prim

import (
	"fmt"
	"strings"
)

// The trait enums marshal by name (JSON reports of an op's traits); a
// value without a name is an error, not a number on the wire.

func marshalEnum[E ~uint8](names []string, e E) ([]byte, error) {
	if int(e) >= len(names) {
		return nil, fmt.Errorf("op: %d has no name (valid: %s)", e, strings.Join(names, ", "))
	}
	return []byte(names[e]), nil
}

func unmarshalEnum[E ~uint8](names []string, b []byte, e *E) error {
	for i, n := range names {
		if n == string(b) {
			*e = E(i)
			return nil
		}
	}
	return fmt.Errorf("op: unknown trait value %q (valid: %s)", b, strings.Join(names, ", "))
}

func (a Autocast) MarshalText() ([]byte, error)  { return marshalEnum(autocastNames[:], a) }
func (a *Autocast) UnmarshalText(b []byte) error { return unmarshalEnum(autocastNames[:], b, a) }

func (f Fusion) MarshalText() ([]byte, error)  { return marshalEnum(fusionNames[:], f) }
func (f *Fusion) UnmarshalText(b []byte) error { return unmarshalEnum(fusionNames[:], b, f) }

func (s Stats) MarshalText() ([]byte, error)  { return marshalEnum(statsNames[:], s) }
func (s *Stats) UnmarshalText(b []byte) error { return unmarshalEnum(statsNames[:], b, s) }

func (r Recompute) MarshalText() ([]byte, error)  { return marshalEnum(recomputeNames[:], r) }
func (r *Recompute) UnmarshalText(b []byte) error { return unmarshalEnum(recomputeNames[:], b, r) }

func (k Kernel) MarshalText() ([]byte, error)  { return marshalEnum(kernelNames[:], k) }
func (k *Kernel) UnmarshalText(b []byte) error { return unmarshalEnum(kernelNames[:], b, k) }
