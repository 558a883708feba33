package safetensors

import (
	"errors"
	"strings"
	"testing"
)

// A header's strings (a tensor's name, a dtype, a metadata key) are
// quoted in errors at most a line long: a megabyte of name made a
// megabyte-long error line.
func TestErrorsQuoteBoundedInput(t *testing.T) {
	long := strings.Repeat("k", 1<<20)
	for _, c := range []struct {
		name, header string
		want         error
	}{
		{"metadata key", `{"__metadata__":{"` + long + `":1}}`, ErrHeader},
		{"dtype", `{"x":{"dtype":"` + long + `","shape":[1],"data_offsets":[0,4]}}`, ErrDType},
		{"tensor name", `{"` + long + `":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, ErrSize},
	} {
		_, err := Decode(build(c.header, make([]byte, 4)), "p")
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		if n := len(err.Error()); n > 512 {
			t.Errorf("%s: a %d-byte error", c.name, n)
		}
	}
}
