package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/tensor"
)

func writeBytes(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func encode(t *testing.T, tensors map[string]*tensor.Tensor, meta map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Write(&buf, tensors, meta); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// patterned fills a tensor with bytes that differ per position, including
// bit patterns a value-level conversion would lose (NaN payloads, -0,
// subnormals), so a round trip must be byte-exact to pass.
func patterned(dt tensor.DType, shape tensor.Shape, seed byte) *tensor.Tensor {
	t := tensor.New(dt, shape)
	for i := range t.Data {
		t.Data[i] = byte(i*31) ^ seed
	}
	if dt == tensor.Bool {
		for i := range t.Data {
			t.Data[i] &= 1
		}
	}
	return t
}

var allDTypes = []tensor.DType{
	tensor.Float32, tensor.Float64, tensor.Float16, tensor.BFloat16,
	tensor.Int32, tensor.Int64, tensor.Uint8, tensor.Bool,
}

func TestRoundTripEveryDType(t *testing.T) {
	shapes := []tensor.Shape{{}, {0}, {7}, {2, 3}, {1, 1, 5}, {3, 0, 2}}
	for _, dt := range allDTypes {
		t.Run(dt.String(), func(t *testing.T) {
			in := map[string]*tensor.Tensor{}
			for i, s := range shapes {
				in["t"+s.String()] = patterned(dt, s, byte(i))
			}
			// Special values written through the typed views, so the test
			// does not only exercise raw bytes.
			switch dt {
			case tensor.Float32:
				in["special"] = tensor.FromFloat32(tensor.Shape{6}, []float32{
					float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.Copysign(0, -1)),
					math.Float32frombits(0x7fa00001), math.Float32frombits(1), math.MaxFloat32})
			case tensor.Float64:
				in["special"] = tensor.FromFloat64(tensor.Shape{3}, []float64{math.Inf(-1), math.Float64frombits(0x7ff0000000000001), math.SmallestNonzeroFloat64})
			case tensor.Int64:
				in["special"] = tensor.FromInt64(tensor.Shape{3}, []int64{math.MinInt64, -1, math.MaxInt64})
			}
			data := encode(t, in, map[string]string{"dtype": dt.String()})
			f, err := Decode(data, "rt")
			if err != nil {
				t.Fatal(err)
			}
			if f.Len() != len(in) || f.Metadata["dtype"] != dt.String() {
				t.Fatalf("got %d tensors, metadata %v", f.Len(), f.Metadata)
			}
			for name, want := range in {
				got, err := f.Tensor(name)
				if err != nil {
					t.Fatal(err)
				}
				if got.DType != dt || !got.Shape.Equal(want.Shape) || !bytes.Equal(got.Data, want.Data) {
					t.Errorf("%s: got %v %v % x, want %v %v % x", name, got.DType, got.Shape, got.Data, dt, want.Shape, want.Data)
				}
			}
			// Through the file system, by each reading entry point.
			path := filepath.Join(t.TempDir(), "rt.safetensors")
			if err := WriteFile(path, in, map[string]string{"dtype": dt.String()}); err != nil {
				t.Fatal(err)
			}
			onDisk, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(onDisk, data) {
				t.Error("WriteFile and Write produced different bytes")
			}
			loaded, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			rf, err := ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			for name, want := range in {
				got := loaded[name]
				if got == nil || !got.Shape.Equal(want.Shape) || !bytes.Equal(got.Data, want.Data) {
					t.Errorf("Load %s: got %v, want %v", name, got, want)
				}
				got, err := rf.Tensor(name)
				if err != nil || !bytes.Equal(got.Data, want.Data) {
					t.Errorf("ReadFile %s: got %v (%v), want %v", name, got, err, want)
				}
			}
		})
	}
}

// Golden files from the reference implementation's own tests
// (safetensors/src/tensor.rs: test_serialization, test_empty,
// test_serialization_forced_alignement), so byte-compatibility is checked
// against bytes the Rust writer is known to produce.
func TestWriteMatchesReferenceBytes(t *testing.T) {
	f32 := func(shape tensor.Shape) *tensor.Tensor {
		return tensor.FromFloat32(shape, []float32{0, 1, 2, 3, 4, 5})
	}
	floats := []byte{0, 0, 0, 0, 0, 0, 128, 63, 0, 0, 0, 64, 0, 0, 64, 64, 0, 0, 128, 64, 0, 0, 160, 64}
	tests := []struct {
		name    string
		tensors map[string]*tensor.Tensor
		meta    map[string]string
		want    []byte
	}{
		{"empty", nil, nil, []byte("\x08\x00\x00\x00\x00\x00\x00\x00{}      ")},
		{"empty with metadata", nil, map[string]string{"framework": "pt"},
			[]byte("\x28\x00\x00\x00\x00\x00\x00\x00{\"__metadata__\":{\"framework\":\"pt\"}}     ")},
		{"attn.0", map[string]*tensor.Tensor{"attn.0": f32(tensor.Shape{1, 2, 3})}, nil,
			append([]byte("\x40\x00\x00\x00\x00\x00\x00\x00{\"attn.0\":{\"dtype\":\"F32\",\"shape\":[1,2,3],\"data_offsets\":[0,24]}}"), floats...)},
		{"forced alignment", map[string]*tensor.Tensor{"attn0": f32(tensor.Shape{1, 1, 2, 3})}, nil,
			append([]byte("\x48\x00\x00\x00\x00\x00\x00\x00{\"attn0\":{\"dtype\":\"F32\",\"shape\":[1,1,2,3],\"data_offsets\":[0,24]}}       "), floats...)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := encode(t, tc.tensors, tc.meta)
			if !bytes.Equal(got, tc.want) {
				t.Errorf("got\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

func TestWriteLayout(t *testing.T) {
	in := map[string]*tensor.Tensor{}
	// Odd element counts, so alignment only holds if the order is right.
	for i, dt := range allDTypes {
		in["b"+dt.String()] = patterned(dt, tensor.Shape{3}, byte(i))
		in["a"+dt.String()] = patterned(dt, tensor.Shape{1}, byte(i))
	}
	data := encode(t, in, nil)
	f, err := Decode(data, "layout")
	if err != nil {
		t.Fatal(err)
	}
	want := "aint64 bint64 afloat64 bfloat64 afloat32 bfloat32 aint32 bint32 abfloat16 bbfloat16 afloat16 bfloat16 auint8 buint8 abool bbool"
	if got := strings.Join(f.Names(), " "); got != want {
		t.Errorf("order:\n got %s\nwant %s", got, want)
	}
	if f.DataOffset%8 != 0 {
		t.Errorf("data buffer starts at %d, not 8-byte aligned", f.DataOffset)
	}
	for _, name := range f.Names() {
		info, _ := f.Info(name)
		if (f.DataOffset+info.Begin)%int64(info.DType.Size()) != 0 {
			t.Errorf("%s: data at %d is not aligned to %d", name, f.DataOffset+info.Begin, info.DType.Size())
		}
	}
	if again := encode(t, in, nil); !bytes.Equal(again, data) {
		t.Error("two writes of the same tensors differ")
	}
}

func TestWriteEscapesNames(t *testing.T) {
	name := "a\"b\\c\n\t\b\f\r\x01\x1f\x7f<>&\u00e9\u2028"
	data := encode(t, map[string]*tensor.Tensor{name: patterned(tensor.Uint8, tensor.Shape{1}, 0)}, map[string]string{"k\x00": "v\"</script>"})
	n := binary.LittleEndian.Uint64(data)
	hdr := strings.TrimRight(string(data[8:8+n]), " ")
	want := `{"__metadata__":{"k\u0000":"v\"</script>"},"a\"b\\c\n\t\b\f\r\u0001\u001f` + "\x7f<>&\u00e9\u2028" + `":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`
	if hdr != want {
		t.Errorf("header\n got %s\nwant %s", hdr, want)
	}
	f, err := Decode(data, "esc")
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Names(); len(got) != 1 || got[0] != name || f.Metadata["k\x00"] != "v\"</script>" {
		t.Errorf("names %q, metadata %q", got, f.Metadata)
	}
}

func TestWriteInvalid(t *testing.T) {
	u8 := patterned(tensor.Uint8, tensor.Shape{2}, 0)
	tests := []struct {
		name    string
		tensors map[string]*tensor.Tensor
		meta    map[string]string
		want    error
		msg     string
	}{
		{"nil tensor", map[string]*tensor.Tensor{"a": nil}, nil, ErrData, `tensor "a": tensor is nil`},
		{"reserved name", map[string]*tensor.Tensor{"__metadata__": u8}, nil, ErrHeader, "reserved"},
		{"bad utf-8 name", map[string]*tensor.Tensor{"a\xff": u8}, nil, ErrHeader, "not valid UTF-8"},
		{"bad utf-8 metadata", nil, map[string]string{"k": "\xff"}, ErrHeader, "not valid UTF-8"},
		{"invalid dtype", map[string]*tensor.Tensor{"a": {DType: tensor.Invalid, Shape: tensor.Shape{0}, Data: []byte{}}}, nil, ErrDType, "dtype invalid cannot be stored"},
		{"out-of-range dtype", map[string]*tensor.Tensor{"a": {DType: 200, Shape: tensor.Shape{1}, Data: []byte{0}}}, nil, ErrDType, "cannot be stored"},
		{"negative dim", map[string]*tensor.Tensor{"a": {DType: tensor.Uint8, Shape: tensor.Shape{-1, -2}, Data: []byte{0, 0}}}, nil, ErrShape, "negative"},
		{"overflowing shape", map[string]*tensor.Tensor{"a": {DType: tensor.Uint8, Shape: tensor.Shape{math.MaxInt, 3}, Data: nil}}, nil, ErrShape, "more elements than fit"},
		{"short data", map[string]*tensor.Tensor{"a": {DType: tensor.Float32, Shape: tensor.Shape{2}, Data: make([]byte, 7)}}, nil, ErrSize, "data is 7 bytes, but shape [2] of float32 needs 8"},
		{"bool value 2", map[string]*tensor.Tensor{"a": {DType: tensor.Bool, Shape: tensor.Shape{2}, Data: []byte{1, 2}}}, nil, ErrData, "bool element 1 has byte value 2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := Write(&buf, tc.tensors, tc.meta)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("Write: err = %v, want %v containing %q", err, tc.want, tc.msg)
			}
			if buf.Len() != 0 {
				t.Errorf("Write wrote %d bytes before failing", buf.Len())
			}
			dir := t.TempDir()
			path := filepath.Join(dir, "x.safetensors")
			err = WriteFile(path, tc.tensors, tc.meta)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("WriteFile: err = %v, want %v naming %s", err, tc.want, path)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("WriteFile left %v behind", entries)
			}
		})
	}
}

func TestWriteFileReplacesAtomically(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ckpt.safetensors")
	first := map[string]*tensor.Tensor{"w": tensor.FromFloat32(tensor.Shape{2}, []float32{1, 2})}
	if err := WriteFile(path, first, nil); err != nil {
		t.Fatal(err)
	}
	old, _ := os.ReadFile(path)

	// A failed write must leave the previous checkpoint untouched.
	if err := WriteFile(path, map[string]*tensor.Tensor{"w": nil}, nil); err == nil {
		t.Fatal("WriteFile of a nil tensor succeeded")
	}
	if now, _ := os.ReadFile(path); !bytes.Equal(now, old) {
		t.Fatal("failed WriteFile changed the existing file")
	}

	second := map[string]*tensor.Tensor{"w": tensor.FromFloat32(tensor.Shape{3}, []float32{3, 4, 5})}
	if err := WriteFile(path, second, nil); err != nil {
		t.Fatal(err)
	}
	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if w := got["w"].F32(); len(w) != 3 || w[2] != 5 {
		t.Errorf("after overwrite w = %v", w)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %v, want only the checkpoint", entries)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("mode = %v (%v), want 0644", st.Mode(), err)
	}

	if err := WriteFile(filepath.Join(dir, "no", "such", "dir.safetensors"), first, nil); err == nil {
		t.Error("WriteFile into a missing directory succeeded")
	}
}
