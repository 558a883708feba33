package tensor

import "fmt"

// MarshalText writes PyTorch's name of the type ("float32", "bfloat16",
// ...), so that a DType marshals to JSON by name.
func (d DType) MarshalText() ([]byte, error) {
	if d < Float32 || int(d) >= len(dtypeInfo) {
		return nil, fmt.Errorf("tensor: %v has no name", d)
	}
	return []byte(d.String()), nil
}

// UnmarshalText reads a name ParseDType accepts.
func (d *DType) UnmarshalText(b []byte) error {
	v, err := ParseDType(string(b))
	if err == nil {
		*d = v
	}
	return err
}
