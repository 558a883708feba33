package safetensors

import (
	"encoding/binary"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
)

// build assembles a file from a header and a data buffer, so malformed cases
// can be written as readable JSON.
func build(hdr string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	b = append(b, hdr...)
	return append(b, data...)
}

// withLength is a file whose length prefix is n regardless of what follows.
func withLength(n uint64, rest string) []byte {
	return append(binary.LittleEndian.AppendUint64(nil, n), rest...)
}

// Offset expectations that are not a fixed number.
const (
	anyHeaderOffset = -2 // somewhere inside the JSON header
	anyDataOffset   = -3 // somewhere inside the data buffer
)

func TestDecodeMalformed(t *testing.T) {
	// 2^62 elements fit in a 64-bit int but their bytes overflow uint64; on
	// a 32-bit platform the dimension itself is already too large.
	bigErr, bigMsg := ErrSize, "more than 2^64 bytes"
	if strconv.IntSize == 32 {
		bigErr, bigMsg = ErrShape, "too large"
	}
	zeros := func(n int) []byte { return make([]byte, n) }
	f32x4 := `"dtype":"F32","shape":[4]`
	tests := []struct {
		name   string
		file   []byte
		want   error
		tensor string // expected FormatError.Tensor
		offset int64  // expected FormatError.Offset, or anyHeaderOffset/anyDataOffset
		msg    string // substring of the message
	}{
		{"empty file", nil, ErrTruncated, "", 0, "file is 0 bytes"},
		{"short prefix", []byte{1, 2, 3, 4, 5}, ErrTruncated, "", 0, "file is 5 bytes"},
		{"header past end", withLength(100, `{}`), ErrTruncated, "", 0, "header length 100 runs past the end of the 10-byte file"},
		{"header too large", withLength(MaxHeaderSize+1, `{}`), ErrHeaderTooLarge, "", 0, "exceeds the limit"},
		{"header length 2^64-1", withLength(math.MaxUint64, `{}`), ErrHeaderTooLarge, "", 0, "header length 18446744073709551615"},
		{"header length 2^63", withLength(1<<63, `{}`), ErrHeaderTooLarge, "", 0, "exceeds the limit"},
		{"zero-length header", build(``, nil), ErrHeader, "", 8, "does not start with '{'"},
		{"not an object", build(`[]`, nil), ErrHeader, "", 8, "does not start with '{'"},
		{"leading space", build(` {}`, nil), ErrHeader, "", 8, "does not start with '{'"},
		{"invalid utf-8", build("{\"a\xff\":1}", nil), ErrHeader, "", 11, "not valid UTF-8"},
		{"truncated JSON", build(`{"a":{"dtype":`, nil), ErrHeader, "", anyHeaderOffset, "header JSON ends early"},
		{"bad JSON", build(`{"a" 1}`, nil), ErrHeader, "", anyHeaderOffset, "not valid JSON"},
		{"trailing garbage", build(`{} x`, nil), ErrHeader, "", anyHeaderOffset, "not valid JSON"},
		{"second object", build(`{}{}`, nil), ErrHeader, "", anyHeaderOffset, "after the header object"},
		{"entry not object", build(`{"a":[1]}`, nil), ErrHeader, "a", anyHeaderOffset, "not a JSON object"},
		{"entry null", build(`{"a":null}`, nil), ErrHeader, "a", anyHeaderOffset, "not a JSON object"},
		{"missing dtype", build(`{"a":{"shape":[],"data_offsets":[0,4]}}`, zeros(4)), ErrHeader, "a", anyHeaderOffset, `no "dtype"`},
		{"missing shape", build(`{"a":{"dtype":"F32","data_offsets":[0,4]}}`, zeros(4)), ErrHeader, "a", anyHeaderOffset, `no "shape"`},
		{"missing offsets", build(`{"a":{"dtype":"F32","shape":[]}}`, zeros(4)), ErrHeader, "a", anyHeaderOffset, `no "data_offsets"`},
		{"dtype not string", build(`{"a":{"dtype":4,"shape":[],"data_offsets":[0,4]}}`, zeros(4)), ErrHeader, "a", anyHeaderOffset, "dtype is 4, not a string"},
		{"unknown dtype", build(`{"a":{"dtype":"F31","shape":[],"data_offsets":[0,4]}}`, zeros(4)), ErrDType, "a", anyHeaderOffset, `unknown dtype "F31"`},
		{"lowercase dtype", build(`{"a":{"dtype":"f32","shape":[],"data_offsets":[0,4]}}`, zeros(4)), ErrDType, "a", anyHeaderOffset, `unknown dtype "f32"`},
		{"unsupported dtype", build(`{"a":{"dtype":"I8","shape":[4],"data_offsets":[0,4]}}`, zeros(4)), ErrDType, "a", anyHeaderOffset, `"I8" is not supported`},
		{"shape not array", build(`{"a":{"dtype":"F32","shape":4,"data_offsets":[0,16]}}`, zeros(16)), ErrShape, "a", anyHeaderOffset, "not a JSON array"},
		{"negative dim", build(`{"a":{"dtype":"F32","shape":[-2,2],"data_offsets":[0,16]}}`, zeros(16)), ErrShape, "a", anyHeaderOffset, "element 0 is negative (-2)"},
		{"float dim", build(`{"a":{"dtype":"F32","shape":[2.0,2],"data_offsets":[0,16]}}`, zeros(16)), ErrShape, "a", anyHeaderOffset, "not a non-negative integer"},
		{"exponent dim", build(`{"a":{"dtype":"F32","shape":[4e0],"data_offsets":[0,16]}}`, zeros(16)), ErrShape, "a", anyHeaderOffset, "not a non-negative integer"},
		{"string dim", build(`{"a":{"dtype":"F32","shape":["4"],"data_offsets":[0,16]}}`, zeros(16)), ErrShape, "a", anyHeaderOffset, "not a non-negative integer"},
		{"dim past uint64", build(`{"a":{"dtype":"F32","shape":[18446744073709551616],"data_offsets":[0,16]}}`, zeros(16)), ErrShape, "a", anyHeaderOffset, "too large"},
		{"dim past int64", build(`{"a":{"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,16]}}`, zeros(16)), ErrShape, "a", anyHeaderOffset, "too large"},
		{"element count overflows", build(`{"a":{"dtype":"U8","shape":[65536,65536,65536,65536],"data_offsets":[0,0]}}`, nil), ErrShape, "a", anyHeaderOffset, "more elements than fit in an int"},
		{"byte count overflows", build(`{"a":{"dtype":"F64","shape":[2147483648,2147483648],"data_offsets":[0,0]}}`, nil), bigErr, "a", anyHeaderOffset, bigMsg},
		{"offsets not array", build(`{"a":{`+f32x4+`,"data_offsets":16}}`, zeros(16)), ErrOffsets, "a", anyHeaderOffset, "not a JSON array"},
		{"three offsets", build(`{"a":{`+f32x4+`,"data_offsets":[0,16,16]}}`, zeros(16)), ErrOffsets, "a", anyHeaderOffset, "has 3 numbers"},
		{"one offset", build(`{"a":{`+f32x4+`,"data_offsets":[16]}}`, zeros(16)), ErrOffsets, "a", anyHeaderOffset, "has 1 numbers"},
		{"negative offset", build(`{"a":{`+f32x4+`,"data_offsets":[-16,0]}}`, zeros(16)), ErrOffsets, "a", anyHeaderOffset, "negative"},
		{"reversed offsets", build(`{"a":{`+f32x4+`,"data_offsets":[16,0]}}`, zeros(16)), ErrOffsets, "a", anyHeaderOffset, "end before they begin"},
		{"offsets past buffer", build(`{"a":{`+f32x4+`,"data_offsets":[0,16]}}`, zeros(12)), ErrTruncated, "a", anyHeaderOffset, "data_offsets [0, 16] run past the end of the 12-byte data buffer"},
		{"size mismatch", build(`{"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}}`, zeros(12)), ErrSize, "a", anyHeaderOffset, "data_offsets [0, 12] hold 12 bytes, but shape [2, 2] of F32 needs 16"},
		{"size mismatch empty", build(`{"a":{"dtype":"F32","shape":[0],"data_offsets":[0,4]}}`, zeros(4)), ErrSize, "a", anyHeaderOffset, "needs 0"},
		{"scalar size", build(`{"a":{"dtype":"F64","shape":[],"data_offsets":[0,4]}}`, zeros(4)), ErrSize, "a", anyHeaderOffset, "shape [] of F64 needs 8"},
		{"overlap",
			build(`{"a":{`+f32x4+`,"data_offsets":[0,16]},"b":{`+f32x4+`,"data_offsets":[8,24]}}`, zeros(24)),
			ErrOffsets, "b", anyDataOffset, `data_offsets [8, 24] overlap tensor "a", which ends at 16`},
		{"same offsets",
			build(`{"a":{`+f32x4+`,"data_offsets":[0,16]},"b":{`+f32x4+`,"data_offsets":[0,16]}}`, zeros(16)),
			ErrOffsets, "b", anyDataOffset, `overlap tensor "a"`},
		{"empty tensor inside another",
			build(`{"a":{`+f32x4+`,"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[0],"data_offsets":[8,8]}}`, zeros(16)),
			ErrOffsets, "b", anyDataOffset, `overlap tensor "a"`},
		{"gap",
			build(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}`, zeros(12)),
			ErrOffsets, "b", anyDataOffset, "data bytes [4, 8) before this tensor belong to no tensor"},
		{"not starting at 0", build(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, zeros(8)), ErrOffsets, "a", anyDataOffset, "data bytes [0, 4) before"},
		{"trailing data", build(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, zeros(8)), ErrOffsets, "", anyDataOffset, "data bytes [4, 8) after the last tensor"},
		{"data but no tensors", build(`{}`, zeros(3)), ErrOffsets, "", anyDataOffset, "data bytes [0, 3) after the last tensor"},
		{"duplicate name",
			build(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, zeros(8)),
			ErrHeader, "a", anyHeaderOffset, "appears twice"},
		{"duplicate metadata", build(`{"__metadata__":{},"__metadata__":{}}`, nil), ErrHeader, "", anyHeaderOffset, `"__metadata__" appears twice`},
		{"metadata not object", build(`{"__metadata__":["a"]}`, nil), ErrHeader, "", anyHeaderOffset, "not a JSON object"},
		{"metadata number value", build(`{"__metadata__":{"epoch":3}}`, nil), ErrHeader, "", anyHeaderOffset, `value of "epoch" is 3, not a string`},
		{"metadata null value", build(`{"__metadata__":{"epoch":null}}`, nil), ErrHeader, "", anyHeaderOffset, "not a string"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Decode(tc.file, "bad.safetensors")
			if err == nil {
				t.Fatalf("Decode succeeded with tensors %v, want %v", f.Names(), tc.want)
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("error %q does not wrap %v", err, tc.want)
			}
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("error %q is %T, not *FormatError", err, err)
			}
			if fe.File != "bad.safetensors" || !strings.Contains(err.Error(), "bad.safetensors: ") {
				t.Errorf("error %q does not name the file", err)
			}
			if fe.Tensor != tc.tensor {
				t.Errorf("Tensor = %q, want %q (error %q)", fe.Tensor, tc.tensor, err)
			}
			if tc.tensor != "" && !strings.Contains(err.Error(), `tensor "`+tc.tensor+`"`) {
				t.Errorf("error %q does not name tensor %q", err, tc.tensor)
			}
			if !strings.Contains(fe.Reason, tc.msg) {
				t.Errorf("reason %q does not contain %q", fe.Reason, tc.msg)
			}
			hdrEnd := int64(8 + binary.LittleEndian.Uint64(append(tc.file, make([]byte, 8)...)))
			switch {
			case tc.offset == anyHeaderOffset:
				if fe.Offset < 8 || fe.Offset > hdrEnd {
					t.Errorf("Offset = %d, want within the header [8, %d]", fe.Offset, hdrEnd)
				}
			case tc.offset == anyDataOffset:
				// Exact positions are checked in TestDecodeLayoutOffsets.
				if fe.Offset < hdrEnd || fe.Offset > int64(len(tc.file)) {
					t.Errorf("Offset = %d, want within the data buffer [%d, %d]", fe.Offset, hdrEnd, len(tc.file))
				}
			case fe.Offset != tc.offset:
				t.Errorf("Offset = %d, want %d", fe.Offset, tc.offset)
			}
			if fe.Offset >= 0 && !strings.HasSuffix(err.Error(), ")") {
				t.Errorf("error %q does not state its byte offset", err)
			}
		})
	}
}

// Data-layout errors point at the first byte in question, in file terms.
func TestDecodeLayoutOffsets(t *testing.T) {
	hdr := `{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}`
	_, err := Decode(build(hdr, make([]byte, 12)), "gap")
	var fe *FormatError
	if !errors.As(err, &fe) {
		t.Fatalf("err = %v", err)
	}
	if want := int64(8 + len(hdr) + 4); fe.Offset != want {
		t.Errorf("gap Offset = %d, want %d", fe.Offset, want)
	}
}

func TestDecodeValid(t *testing.T) {
	tests := []struct {
		name  string
		file  []byte
		names []string
		meta  map[string]string
	}{
		{"no tensors", build(`{}`, nil), []string{}, nil},
		{"padded", build(`{}      `, nil), []string{}, nil},
		{"whitespace everywhere", build("{ \"a\" :\n{ \"dtype\" : \"U8\" , \"shape\" : [ 2 ] , \"data_offsets\" : [ 0 , 2 ] } }\t\r\n ", []byte{1, 2}), []string{"a"}, nil},
		{"null metadata", build(`{"__metadata__":null}`, nil), []string{}, nil},
		{"metadata", build(`{"__metadata__":{"k":"v","e":""}}`, nil), []string{}, map[string]string{"k": "v", "e": ""}},
		{"unknown fields ignored",
			build(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"extra":{"x":[1]}}}`, []byte{7}), []string{"a"}, nil},
		// The header may list tensors in any order; Names follows the data.
		{"header order differs from data order",
			build(`{"z":{"dtype":"U8","shape":[1],"data_offsets":[1,2]},"y":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, []byte{1, 2}),
			[]string{"y", "z"}, nil},
		{"empty tensors share an offset",
			build(`{"e2":{"dtype":"F32","shape":[0,5],"data_offsets":[4,4]},"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]},"e1":{"dtype":"I64","shape":[3,0],"data_offsets":[4,4]},"e0":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`, make([]byte, 4)),
			[]string{"e0", "a", "e1", "e2"}, nil},
		{"escaped name", build(`{"a\u00e9\"\\":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, []byte{1}), []string{"a\u00e9\"\\"}, nil},
		{"huge zero-size shape", build(`{"a":{"dtype":"F64","shape":[2147483647,0],"data_offsets":[0,0]}}`, nil), []string{"a"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Decode(tc.file, tc.name)
			if err != nil {
				t.Fatal(err)
			}
			if got := f.Names(); strings.Join(got, ",") != strings.Join(tc.names, ",") || len(got) != len(tc.names) || f.Len() != len(got) {
				t.Errorf("Names() = %q, want %q", got, tc.names)
			}
			if len(f.Metadata) != len(tc.meta) {
				t.Errorf("Metadata = %v, want %v", f.Metadata, tc.meta)
			}
			for k, v := range tc.meta {
				if f.Metadata[k] != v {
					t.Errorf("Metadata[%q] = %q, want %q", k, f.Metadata[k], v)
				}
			}
			for _, name := range f.Names() {
				info, err := f.Info(name)
				if err != nil {
					t.Fatal(err)
				}
				tt, err := f.Tensor(name)
				if err != nil {
					t.Fatal(err)
				}
				if !tt.Shape.Equal(info.Shape) || tt.DType != info.DType || int64(len(tt.Data)) != info.End-info.Begin {
					t.Errorf("%s: tensor %v %v (%d bytes) disagrees with info %+v", name, tt.DType, tt.Shape, len(tt.Data), info)
				}
			}
		})
	}
}

func TestTensorErrors(t *testing.T) {
	f, err := Decode(build(`{"b":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}}`, []byte{1, 0, 2}), "b.st")
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Tensor("b")
	var fe *FormatError
	if !errors.Is(err, ErrData) || !errors.As(err, &fe) {
		t.Fatalf("bool byte 2: err = %v, want ErrData", err)
	}
	if fe.Offset != f.DataOffset+2 || fe.Tensor != "b" {
		t.Errorf("bool byte 2: got %+v, want offset %d", fe, f.DataOffset+2)
	}
	if _, err := f.Tensor("nope"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("missing tensor: err = %v, want ErrNotFound naming it", err)
	}
	if _, err := f.Info("nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing info: err = %v, want ErrNotFound", err)
	}
}

// A File opened from disk reads lazily; a file cut short after Open must give
// ErrTruncated, not garbage or a panic.
func TestOpenFileShrinks(t *testing.T) {
	path := t.TempDir() + "/x.safetensors"
	data := build(`{"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}}`, []byte{1, 2, 3, 4, 5, 6, 7, 8})
	writeBytes(t, path, data)
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	writeBytes(t, path, data[:len(data)-3])
	if _, err := f.Tensor("a"); !errors.Is(err, ErrTruncated) {
		t.Errorf("err = %v, want ErrTruncated", err)
	}
}

func TestOpenMissing(t *testing.T) {
	_, err := Open(t.TempDir() + "/missing.safetensors")
	if err == nil || !strings.Contains(err.Error(), "missing.safetensors") {
		t.Errorf("err = %v, want one naming the file", err)
	}
	if _, err := Load(t.TempDir() + "/missing.safetensors"); err == nil {
		t.Error("Load of a missing file succeeded")
	}
}
