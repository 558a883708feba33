package safetensors

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/headroom-ml/headroom/tensor"
)

// FuzzDecode checks that no input makes the reader panic or over-allocate,
// that every rejection is a *FormatError, and that whatever is accepted
// survives a write/read round trip unchanged.
func FuzzDecode(f *testing.F) {
	var buf bytes.Buffer
	seeds := []map[string]*tensor.Tensor{
		nil,
		{"a": patterned(tensor.Float32, tensor.Shape{2, 2}, 1)},
		{"x": patterned(tensor.Bool, tensor.Shape{3}, 0), "y": patterned(tensor.BFloat16, tensor.Shape{}, 2), "z": patterned(tensor.Int64, tensor.Shape{0, 4}, 3)},
	}
	for _, s := range seeds {
		buf.Reset()
		if err := Write(&buf, s, map[string]string{"k": "v"}); err != nil {
			f.Fatal(err)
		}
		f.Add(bytes.Clone(buf.Bytes()))
	}
	if ref, err := os.ReadFile(refPath); err == nil {
		f.Add(ref)
	}
	f.Add(build(`{"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}}`, make([]byte, 12)))
	f.Add(build(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, []byte{1}))
	// Past the limits: more dimensions than MaxDims, a long data_offsets.
	f.Add(hugeShapeHeader(MaxDims+1, "0"))
	f.Add(hugeShapeHeader(MaxDims, "0"))
	f.Add(build(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]}}`, nil))

	f.Add(build(`{"a\"\u00e9":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"dtype":"F31","x":{"y":["}"]}}}`, []byte{1}))
	f.Fuzz(func(t *testing.T, data []byte) {
		// The header read in place and read by encoding/json's Decoder
		// agree, in what they accept and in what they say.
		decoderOnly = true
		slow, slowErr := Decode(data, "fuzz")
		decoderOnly = false
		file, err := Decode(data, "fuzz")
		if fmt.Sprint(err) != fmt.Sprint(slowErr) {
			t.Fatalf("in place: %v\ndecoder: %v", err, slowErr)
		}
		if err == nil && !slices.Equal(file.Names(), slow.Names()) {
			t.Fatalf("in place: %q\ndecoder: %q", file.Names(), slow.Names())
		}
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is %T, not *FormatError", err, err)
			}
			return
		}
		in := map[string]*tensor.Tensor{}
		for _, name := range file.Names() {
			tt, err := file.Tensor(name)
			if errors.Is(err, ErrData) {
				return // a bool byte other than 0/1: rightly refused
			}
			if err != nil {
				t.Fatalf("Tensor(%q) of an accepted file: %v", name, err)
			}
			info, _ := file.Info(name)
			if !bytes.Equal(tt.Data, data[file.DataOffset+info.Begin:file.DataOffset+info.End]) {
				t.Fatalf("Tensor(%q) bytes differ from the file's", name)
			}
			in[name] = tt
		}
		var out bytes.Buffer
		if err := Write(&out, in, file.Metadata); err != nil {
			t.Fatalf("rewriting an accepted file: %v", err)
		}
		again, err := Decode(out.Bytes(), "rewritten")
		if err != nil {
			t.Fatalf("rereading a rewritten file: %v", err)
		}
		if again.Len() != len(in) || len(again.Metadata) != len(file.Metadata) {
			t.Fatalf("rewrite has %d tensors and %d metadata entries, want %d and %d", again.Len(), len(again.Metadata), len(in), len(file.Metadata))
		}
		for k, v := range file.Metadata {
			if again.Metadata[k] != v {
				t.Fatalf("metadata %q: %q after rewrite, want %q", k, again.Metadata[k], v)
			}
		}
		for name, want := range in {
			got, err := again.Tensor(name)
			if err != nil || got.DType != want.DType || !got.Shape.Equal(want.Shape) || !bytes.Equal(got.Data, want.Data) {
				t.Fatalf("tensor %q changed in a rewrite (err %v)", name, err)
			}
		}
	})
}
