package train

import (
	"fmt"
	"strconv"
	"strings"
)

// A Config marshals to JSON (and reads back) with its enums by name:
//
//	{"Accumulation":4,"Precision":"bf16-mixed","Recompute":"selective",
//	 "Storage":{"To":"int8","MinBytes":0,"Masks":false},
//	 "OptimizerInBackward":false,"Outputs":false}

// MarshalText writes the kind's name ("none", "selective", ...).
func (k RecomputeKind) MarshalText() ([]byte, error) {
	if int(k) >= len(recomputeNames) {
		return nil, fmt.Errorf("train: %v has no name", k)
	}
	return []byte(k.String()), nil
}

// UnmarshalText reads a kind's name.
func (k *RecomputeKind) UnmarshalText(b []byte) error {
	for i, n := range recomputeNames {
		if n == string(b) {
			*k = RecomputeKind(i)
			return nil
		}
	}
	return fmt.Errorf("train: unknown recomputation kind %q (valid: %s)", b, strings.Join(recomputeNames[:], ", "))
}

// MarshalText writes the policy as text: "none", "selective", "regions",
// "selective:op1,op2" (RecomputeOps) or "nodes:3,17" (RecomputeIDs). A
// custom policy (RecomputeCustom) has no text form: an error.
func (r Recompute) MarshalText() ([]byte, error) {
	switch r.Kind {
	case RecomputeCustom:
		return nil, fmt.Errorf("train: a custom recomputation policy (%T) has no text form", r.custom)
	case RecomputeSelective, RecomputeNodes:
		if r.set != "" {
			return []byte(r.Kind.String() + ":" + r.set), nil
		}
	}
	return r.Kind.MarshalText()
}

// UnmarshalText reads what MarshalText writes.
func (r *Recompute) UnmarshalText(b []byte) error {
	kind, set, hasSet := strings.Cut(string(b), ":")
	var k RecomputeKind
	if err := k.UnmarshalText([]byte(kind)); err != nil {
		return err
	}
	switch {
	case k == RecomputeCustom:
		return fmt.Errorf("train: a custom recomputation policy has no text form")
	case !hasSet:
		if k == RecomputeNodes {
			*r = RecomputeIDs(nil)
			return nil
		}
		*r = Recompute{Kind: k}
		return nil
	case k == RecomputeSelective:
		*r = RecomputeOps(strings.Split(set, ",")...)
		return nil
	case k == RecomputeNodes:
		ids := map[int]bool{}
		for _, p := range strings.Split(set, ",") {
			id, err := strconv.Atoi(p)
			if err != nil || id < 0 {
				return fmt.Errorf("train: recomputation %q: %q is not a node ID", b, p)
			}
			ids[id] = true
		}
		*r = RecomputeIDs(ids)
		return nil
	}
	return fmt.Errorf("train: recomputation %q: %s takes no set", b, k)
}
