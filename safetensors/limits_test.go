package safetensors

import (
	"errors"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// allocated reports the bytes allocated while fn runs.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// hugeShapeHeader is a header whose one tensor has a shape of n zeros (n
// dimensions, zero elements, so its data_offsets are [0, 0]).
func hugeShapeHeader(n int, dim string) []byte {
	var b strings.Builder
	b.WriteString(`{"a":{"dtype":"U8","shape":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(dim)
	}
	b.WriteString(`],"data_offsets":[0,0]}}`)
	return build(b.String(), nil)
}

// A header of a few megabytes whose one shape has a million dimensions is
// refused for its dimension count, at a cost proportional to the header,
// not tens of times it (a 100 MB header took 5.1 GiB and 30 s).
func TestHugeShapeIsBounded(t *testing.T) {
	for _, dim := range []string{"0", "1", "-1", `"x"`, "1.5"} {
		data := hugeShapeHeader(1_000_000, dim)
		var err error
		n := allocated(func() { _, err = Decode(data, "dims.safetensors") })
		var fe *FormatError
		if !errors.As(err, &fe) || !errors.Is(err, ErrShape) {
			t.Fatalf("dim %s: err = %v, want ErrShape", dim, err)
		}
		if dim == "0" || dim == "1" {
			if want := "more than " + strconv.Itoa(64) + " dimensions"; !strings.Contains(err.Error(), want) {
				t.Errorf("dim %s: err = %v, want %q", dim, err, want)
			}
		}
		if len(err.Error()) > 300 {
			t.Errorf("dim %s: error is %d bytes", dim, len(err.Error()))
		}
		if limit := uint64(2*len(data)) + 1<<20; n > limit {
			t.Errorf("dim %s: decoding a %d-byte file allocated %d bytes, over %d", dim, len(data), n, limit)
		}
	}
	// MaxDims dimensions are accepted.
	if _, err := Decode(hugeShapeHeader(64, "0"), "ok"); err != nil {
		t.Errorf("%d dimensions: %v", 64, err)
	}
}

// A data_offsets array of a million numbers is refused as such, cheaply.
func TestLongOffsetsAreBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[0`)
	for range 1_000_000 {
		b.WriteString(",0")
	}
	b.WriteString(`]}}`)
	data := build(b.String(), nil)
	var err error
	n := allocated(func() { _, err = Decode(data, "offs") })
	if !errors.Is(err, ErrOffsets) || !strings.Contains(err.Error(), "has more than 16 numbers") {
		t.Fatalf("err = %v", err)
	}
	if limit := uint64(2*len(data)) + 1<<20; n > limit {
		t.Errorf("decoding a %d-byte file allocated %d bytes, over %d", len(data), n, limit)
	}
}
