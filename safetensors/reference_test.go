package safetensors

import (
	"bytes"
	"os"
	"testing"

	"github.com/headroom-ml/headroom/tensor"
)

// refPath was written by PyTorch through scripts/reference/st.py; regenerate
// with /usr/bin/python3 scripts/reference/safetensors_ref.py.
const refPath = "testdata/torch_ref.safetensors"

// refTensors rebuilds, from the index formulas in safetensors_ref.py, what
// torch put in refPath. Float16/bfloat16 bits are spelled out by hand rather
// than produced by tensor's converters, so this test does not depend on them.
func refTensors() map[string]*tensor.Tensor {
	out := map[string]*tensor.Tensor{}
	f32 := make([]float32, 12)
	for i := range f32 {
		f32[i] = float32(i-6) / 4
	}
	out["f32"] = tensor.FromFloat32(tensor.Shape{3, 4}, f32)
	f32t := make([]float32, 12)
	for i := 0; i < 4; i++ {
		for j := 0; j < 3; j++ {
			f32t[i*3+j] = float32(4*j + i)
		}
	}
	out["f32_t"] = tensor.FromFloat32(tensor.Shape{4, 3}, f32t)
	f64 := make([]float64, 6)
	for i := range f64 {
		f64[i] = float64(i-3) / 3
	}
	out["f64"] = tensor.FromFloat64(tensor.Shape{2, 3}, f64)

	// float16 of (i-8)*0.25 for i in 0..15: -2, -1.75, ..., 1.75.
	out["f16"] = halfTensor(tensor.Float16, tensor.Shape{4, 4}, []uint16{
		0xc000, 0xbf00, 0xbe00, 0xbd00, 0xbc00, 0xba00, 0xb800, 0xb400,
		0x0000, 0x3400, 0x3800, 0x3a00, 0x3c00, 0x3d00, 0x3e00, 0x3f00,
	})
	// bfloat16 of (i-8)*0.5: -4, -3.5, ..., 3.5.
	out["bf16"] = halfTensor(tensor.BFloat16, tensor.Shape{2, 8}, []uint16{
		0xc080, 0xc060, 0xc040, 0xc020, 0xc000, 0xbfc0, 0xbf80, 0xbf00,
		0x0000, 0x3f00, 0x3f80, 0x3fc0, 0x4000, 0x4020, 0x4040, 0x4060,
	})
	i32 := tensor.New(tensor.Int32, tensor.Shape{3, 2, 2})
	for i := range i32.I32() {
		i32.I32()[i] = int32(i - 5)
	}
	out["i32"] = i32
	i64 := make([]int64, 6)
	for i := range i64 {
		i64[i] = int64(i-3)<<40 + 7
	}
	out["i64"] = tensor.FromInt64(tensor.Shape{6}, i64)
	u8 := tensor.New(tensor.Uint8, tensor.Shape{7})
	for i := range u8.Data {
		u8.Data[i] = byte(37 * i)
	}
	out["u8"] = u8
	b := tensor.New(tensor.Bool, tensor.Shape{10})
	for i := range b.Data {
		if i%3 == 0 {
			b.Data[i] = 1
		}
	}
	out["bool"] = b
	out["scalar"] = tensor.FromFloat32(tensor.Shape{}, []float32{3.5})
	out["empty"] = tensor.New(tensor.Float32, tensor.Shape{0, 3})
	return out
}

func halfTensor(dt tensor.DType, shape tensor.Shape, bits []uint16) *tensor.Tensor {
	t := tensor.New(dt, shape)
	copy(t.U16(), bits)
	return t
}

func TestReadTorchReference(t *testing.T) {
	f, err := Open(refPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := refTensors()
	if f.Len() != len(want) {
		t.Errorf("file has %d tensors %v, want %d", f.Len(), f.Names(), len(want))
	}
	if f.Metadata["format"] != "pt" || f.Metadata["source"] != "scripts/reference/safetensors_ref.py" {
		t.Errorf("metadata = %v", f.Metadata)
	}
	for name, w := range want {
		got, err := f.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		if got.DType != w.DType || !got.Shape.Equal(w.Shape) {
			t.Errorf("%s: %v %v, want %v %v", name, got.DType, got.Shape, w.DType, w.Shape)
			continue
		}
		if !bytes.Equal(got.Data, w.Data) {
			t.Errorf("%s: values %v, want %v", name, got.Float64s(), w.Float64s())
		}
	}
}

// The Go writer and st.py must agree byte for byte, so reference files can
// be compared whole and either side can regenerate them.
func TestWriteMatchesTorchReference(t *testing.T) {
	want, err := os.ReadFile(refPath)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	meta := map[string]string{"format": "pt", "source": "scripts/reference/safetensors_ref.py"}
	if err := Write(&buf, refTensors(), meta); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Errorf("Go writer output differs from st.py's:\n got %q\nwant %q", buf.Bytes(), want)
	}
}
