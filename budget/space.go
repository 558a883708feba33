package budget

import (
	"fmt"
	"slices"
	"strings"

	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/transform"
)

// AutoPrecisions are the precisions `--precision auto` lets the planner
// choose from. fp16-mixed needs dynamic loss scaling and bf16-true rounds
// the weights themselves: the user asks for those by name.
var AutoPrecisions = []transform.Precision{transform.FP32, transform.BF16Mixed}

// AutoCompress are the saved-activation storage policies `--compress auto`
// lets the planner choose from: none, ReLU masks as bits (exact), and bf16
// or int8 with masks as bits. fp16 (overflow above 65504) and offload (host
// memory and copies) are asked for by name.
var AutoCompress = []transform.Compression{{}, mustCompression("masks"), mustCompression("bf16"), mustCompression("int8")}

// Compression is the storage policy named name (a transform.Compressions
// name) as a value: the zero value for none.
func Compression(name string) (transform.Compression, error) {
	cp, err := transform.ParseCompress(name)
	if err != nil {
		return transform.Compression{}, err
	}
	return train.StorageOf(cp)
}

func mustCompression(name string) transform.Compression {
	c, err := Compression(name)
	if err != nil {
		panic(err)
	}
	return c
}

// ParsePrecisions reads a --precision value: "auto" (AutoPrecisions) or
// one or more comma-separated transform.Precisions names.
func ParsePrecisions(s string) ([]transform.Precision, error) {
	return parseList(s, "precision", AutoPrecisions, transform.Precisions, transform.ParsePrecision)
}

// ParseCompressions reads a --compress value: "auto" (AutoCompress) or one
// or more comma-separated transform.Compressions names.
func ParseCompressions(s string) ([]transform.Compression, error) {
	return parseList(s, "compression policy", AutoCompress, transform.Compressions, Compression)
}

// parseList reads "auto" or a comma-separated list of names, each read by
// parse, dropping repeats: the one place the flags' lists are read.
func parseList[T comparable](s, what string, auto []T, valid []string, parse func(string) (T, error)) ([]T, error) {
	if s == "auto" {
		return slices.Clone(auto), nil
	}
	var out []T
	for _, n := range strings.Split(s, ",") {
		n = strings.TrimSpace(n)
		v, err := parse(n)
		if err != nil || n == "" {
			return nil, fmt.Errorf("unknown %s %q (valid: auto, %s, or a comma-separated list of them)", what, n, strings.Join(valid, ", "))
		}
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out, nil
}

// Names lists values by name (String), for messages and help texts.
func Names[T fmt.Stringer](vs []T) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.String()
	}
	return out
}

// Policy is a recomputation policy the planner searches.
type Policy uint8

const (
	// RecomputeNone keeps every activation.
	RecomputeNone Policy = iota
	// RecomputeSelective recomputes cheap elementwise ops and norms
	// (transform.CheapOps).
	RecomputeSelective
	// RecomputeAuto recomputes the fewest nodes, cheapest per byte freed
	// first, and checkpoints residual chains in segments, to fit.
	RecomputeAuto
)

var policyNames = [...]string{"none", "selective", "auto"}

func (p Policy) String() string {
	if int(p) < len(policyNames) {
		return policyNames[p]
	}
	return fmt.Sprintf("Policy(%d)", p)
}

// MarshalText writes the policy by name (JSON too).
func (p Policy) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText reads a policy name.
func (p *Policy) UnmarshalText(b []byte) error {
	q, err := ParsePolicy(string(b))
	if err == nil {
		*p = q
	}
	return err
}

// Policies is every recomputation policy, in the order searched.
var Policies = []Policy{RecomputeNone, RecomputeSelective, RecomputeAuto}

// ParsePolicy reads a policy name: the one place policy names are read.
func ParsePolicy(s string) (Policy, error) {
	for i, n := range policyNames {
		if n == s {
			return Policy(i), nil
		}
	}
	return 0, fmt.Errorf("unknown recomputation policy %q (valid: %s)", s, strings.Join(policyNames[:], ", "))
}

// Recompute is the trainer's recomputation for a policy that names no
// nodes (none and selective; auto's nodes come from the planner).
func (p Policy) Recompute() train.Recompute {
	if p == RecomputeSelective {
		return train.Selective
	}
	return train.NoRecompute
}

// setting is a precision and a saved-activation storage policy: the
// numerics of a plan, searched together with micro-batching and
// recomputation.
type setting struct {
	prec transform.Precision
	comp string                   // transform.Compressions name
	cpol transform.CompressPolicy // at its default threshold; nil for none
}

// refinable reports whether the planner chooses which tensors s compresses
// (a size threshold): formats that cost a pass per tensor.
func (s setting) refinable() bool {
	cp, ok := s.cpol.(transform.Compression)
	return ok && cp.To != transform.Keep
}

// withMin is s's policy compressing only tensors of at least b bytes (0:
// the default threshold).
func (s setting) withMin(b int64) transform.CompressPolicy {
	if b == 0 || !s.refinable() {
		return s.cpol
	}
	cp := s.cpol.(transform.Compression)
	cp.MinBytes = b
	return cp
}

// settings is the cross product of the allowed precisions and compression
// policies, in the order given (the first is the baseline's).
func settings(p Problem) ([]setting, error) {
	precs, comps := p.Precisions, p.Compress
	if len(precs) == 0 {
		precs = []transform.Precision{transform.FP32}
	}
	if len(comps) == 0 {
		comps = []transform.Compression{{}}
	}
	var out []setting
	for _, prec := range precs {
		if int(prec) >= len(transform.Precisions) {
			return nil, fmt.Errorf("budget: unknown precision %v", prec)
		}
		for _, c := range comps {
			var cp transform.CompressPolicy
			if c != (transform.Compression{}) {
				cp = c
			}
			out = append(out, setting{prec, c.String(), cp})
		}
	}
	return out, nil
}
