package safetensors_test

import (
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/headroom-ml/headroom/safetensors"
	"github.com/headroom-ml/headroom/tensor"
)

func Example() {
	dir, err := os.MkdirTemp("", "example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "model.safetensors")

	weights := map[string]*tensor.Tensor{
		"fc.weight": tensor.FromFloat32(tensor.Shape{2, 3}, []float32{1, 2, 3, 4, 5, 6}),
		"fc.bias":   tensor.FromFloat32(tensor.Shape{2}, []float32{0.5, -0.5}),
		"step":      tensor.FromInt64(tensor.Shape{}, []int64{100}),
	}
	if err := safetensors.WriteFile(path, weights, map[string]string{"format": "pt"}); err != nil {
		log.Fatal(err)
	}

	// Open reads only the header; tensors are read when asked for.
	f, err := safetensors.Open(path)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	for _, name := range f.Names() {
		info, _ := f.Info(name)
		fmt.Printf("%s %v %v\n", name, info.DType, info.Shape)
	}
	w, err := f.Tensor("fc.weight")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(w.F32(), f.Metadata["format"])

	_, err = f.Tensor("fc.wieght")
	fmt.Println(errors.Is(err, safetensors.ErrNotFound))

	// Output:
	// step int64 []
	// fc.bias float32 [2]
	// fc.weight float32 [2, 3]
	// [1 2 3 4 5 6] pt
	// true
}

// Errors name the file, the tensor, the problem and the byte offset.
func ExampleDecode_error() {
	header := `{"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}}`
	file := append([]byte{byte(len(header)), 0, 0, 0, 0, 0, 0, 0}, header...)
	file = append(file, make([]byte, 12)...)

	_, err := safetensors.Decode(file, "ckpt.safetensors")
	fmt.Println(err)
	fmt.Println(errors.Is(err, safetensors.ErrSize))
	// Output:
	// safetensors: ckpt.safetensors: tensor "w": data_offsets [0, 12] hold 12 bytes, but shape [2, 2] of F32 needs 16 (at byte 13)
	// true
}
