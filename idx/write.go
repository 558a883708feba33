package idx

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/bits"
	"slices"
)

// Write encodes f as an uncompressed IDX file. f.Data must hold the elements
// in the file's byte order (big-endian), exactly as Decode returns them, and
// its length must match f.Dims and f.Type; f.Name is not stored. Wrap w in a
// gzip.Writer to produce a compressed file.
func Write(w io.Writer, f *File) error {
	if f.Type.Size() == 0 {
		return fmt.Errorf("idx: write %s: unknown type %v", f.Name, f.Type)
	}
	if len(f.Dims) == 0 || len(f.Dims) > MaxDims {
		return fmt.Errorf("idx: write %s: %d dimensions, want 1 to %d", f.Name, len(f.Dims), MaxDims)
	}
	hdr := make([]byte, 4+4*len(f.Dims))
	hdr[2] = byte(f.Type)
	hdr[3] = byte(len(f.Dims))
	for i, v := range f.Dims {
		if v < 0 || uint64(v) > math.MaxUint32 {
			return fmt.Errorf("idx: write %s: dimension %d is %d, not a uint32", f.Name, i, v)
		}
		binary.BigEndian.PutUint32(hdr[4+4*i:], uint32(v))
	}
	// Any zero dimension makes the file empty however large the others are
	// (Decode accepts such files), so only nonzero products can overflow.
	var n uint64
	if !slices.Contains(f.Dims, 0) {
		n = uint64(f.Type.Size())
		for _, v := range f.Dims {
			hi, lo := bits.Mul64(n, uint64(v))
			if hi != 0 {
				return fmt.Errorf("idx: write %s: dims %v of %v overflow 64 bits", f.Name, f.Dims, f.Type)
			}
			n = lo
		}
	}
	if n != uint64(len(f.Data)) {
		return fmt.Errorf("idx: write %s: dims %v of %v need %d bytes, data has %d", f.Name, f.Dims, f.Type, n, len(f.Data))
	}
	if _, err := w.Write(hdr); err != nil {
		return err
	}
	_, err := w.Write(f.Data)
	return err
}
