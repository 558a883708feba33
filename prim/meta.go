package prim

import (
	"fmt"

	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// metas1 is a helper for single-output Infer implementations.
func metas1(dt tensor.DType, shape tensor.Shape) []trace.Meta {
	return []trace.Meta{{DType: dt, Shape: shape}}
}

func wantInputs(in []trace.Meta, n int) error {
	if len(in) != n {
		return fmt.Errorf("expected %d inputs, got %d", n, len(in))
	}
	return nil
}

func sameDType(in []trace.Meta) error {
	for i := 1; i < len(in); i++ {
		if in[i].DType != in[0].DType {
			return fmt.Errorf("dtype mismatch: %v and %v (cast one of them explicitly)", in[0].DType, in[i].DType)
		}
	}
	return nil
}

func wantFloat(m trace.Meta) error {
	if !m.DType.IsFloat() {
		return fmt.Errorf("expected a floating-point tensor, got %v", m.DType)
	}
	return nil
}
