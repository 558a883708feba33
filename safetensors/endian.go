package safetensors

import (
	"encoding/binary"
	"slices"
)

// hostLittleEndian is true on every platform headroom targets today; the
// format is little-endian, and tensor.Tensor holds native-endian bytes, so a
// big-endian host must swap each element on the way in and out.
var hostLittleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// swapElements reverses the bytes of each size-byte element of b in place.
func swapElements(b []byte, size int) {
	if size < 2 {
		return
	}
	for i := 0; i+size <= len(b); i += size {
		slices.Reverse(b[i : i+size])
	}
}
