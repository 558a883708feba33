package idx_test

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/headroom-ml/headroom/idx"
)

func Example() {
	// Write a 2x3 ubyte file, as MNIST-style images are stored...
	var buf bytes.Buffer
	err := idx.Write(&buf, &idx.File{Type: idx.Uint8, Dims: []int{2, 3}, Data: []byte{0, 1, 2, 253, 254, 255}})
	if err != nil {
		panic(err)
	}
	// ...and read it back.
	f, err := idx.Decode(bytes.NewReader(buf.Bytes()), "tiny-idx2-ubyte")
	if err != nil {
		panic(err)
	}
	fmt.Println(f.Type, f.Dims, f.Data)

	// A truncated copy is reported with the file, the offset and the numbers.
	_, err = idx.Decode(bytes.NewReader(buf.Bytes()[:14]), "tiny-idx2-ubyte")
	var fe *idx.FormatError
	fmt.Println(errors.As(err, &fe), fe.Offset)
	fmt.Println(err)
	// Output:
	// ubyte [2 3] [0 1 2 253 254 255]
	// true 12
	// idx: tiny-idx2-ubyte: offset 12: truncated data: dims [2 3] of ubyte need 6 bytes, only 2 present
}
