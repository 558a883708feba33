package transform

import "fmt"

// The enums of this package marshal by name (JSON, flags, config files), and
// a value without a name is an error rather than a number on the wire.

// MarshalText writes the precision's name ("fp32", "bf16-mixed", ...).
func (p Precision) MarshalText() ([]byte, error) {
	if int(p) >= len(precisionNames) {
		return nil, fmt.Errorf("transform: %v has no name", p)
	}
	return []byte(p.String()), nil
}

// UnmarshalText reads a name ParsePrecision accepts.
func (p *Precision) UnmarshalText(b []byte) error {
	v, err := ParsePrecision(string(b))
	if err == nil {
		*p = v
	}
	return err
}

// MarshalText writes the format's name ("none", "bf16", ...).
func (f Format) MarshalText() ([]byte, error) {
	if int(f) >= len(formatNames) {
		return nil, fmt.Errorf("transform: %v has no name", f)
	}
	return []byte(f.String()), nil
}

// UnmarshalText reads a name ParseFormat accepts.
func (f *Format) UnmarshalText(b []byte) error {
	v, err := ParseFormat(string(b))
	if err == nil {
		*f = v
	}
	return err
}
