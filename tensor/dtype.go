// Package tensor holds the plain data types every stage shares: element
// types, shapes with broadcasting, and host tensors used for weights, inputs
// and reference data. Nothing here knows about graphs or devices.
package tensor

import (
	"fmt"
	"strings"
)

// DType is an element type.
type DType uint8

// The element types. Float16 and BFloat16 are storage types: kernels convert
// them to float32 and back with round-to-nearest-even.
const (
	Invalid DType = iota
	Float32
	Float64
	Float16
	BFloat16
	Int32
	Int64
	Uint8
	Bool
)

var dtypeInfo = [...]struct {
	name string
	size int
}{
	Invalid:  {"invalid", 0},
	Float32:  {"float32", 4},
	Float64:  {"float64", 8},
	Float16:  {"float16", 2},
	BFloat16: {"bfloat16", 2},
	Int32:    {"int32", 4},
	Int64:    {"int64", 8},
	Uint8:    {"uint8", 1},
	Bool:     {"bool", 1},
}

// Size is the number of bytes of one element.
func (d DType) Size() int {
	if int(d) >= len(dtypeInfo) {
		return 0
	}
	return dtypeInfo[d].size
}

// String returns PyTorch's name for the type ("float32", "bfloat16", ...).
func (d DType) String() string {
	if int(d) >= len(dtypeInfo) {
		return fmt.Sprintf("dtype(%d)", uint8(d))
	}
	return dtypeInfo[d].name
}

// IsFloat reports whether d is a floating-point type.
func (d DType) IsFloat() bool {
	return d == Float32 || d == Float64 || d == Float16 || d == BFloat16
}

// ParseDType parses a PyTorch dtype name; "torch." prefixes and the aliases
// "float", "half", "double", "long", "int" are accepted.
func ParseDType(s string) (DType, error) {
	s = strings.TrimPrefix(strings.ToLower(s), "torch.")
	switch s {
	case "float":
		return Float32, nil
	case "double":
		return Float64, nil
	case "half":
		return Float16, nil
	case "long":
		return Int64, nil
	case "int":
		return Int32, nil
	}
	for d := Float32; int(d) < len(dtypeInfo); d++ {
		if dtypeInfo[d].name == s {
			return d, nil
		}
	}
	return Invalid, fmt.Errorf("unknown dtype %q (valid: float32, float64, float16, bfloat16, int32, int64, uint8, bool)", s)
}
