package device

import "fmt"

// MarshalText writes the category's name ("parameter", "optimizer state",
// ...), so that a Category marshals to JSON by name.
func (c Category) MarshalText() ([]byte, error) {
	if c >= numCategories {
		return nil, fmt.Errorf("device: %v has no name", c)
	}
	return []byte(c.String()), nil
}

// UnmarshalText reads a name ParseCategory accepts.
func (c *Category) UnmarshalText(b []byte) error {
	v, err := ParseCategory(string(b))
	if err == nil {
		*c = v
	}
	return err
}
