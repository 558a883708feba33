package tensor_test

import (
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/tensor"
)

func TestParseDType(t *testing.T) {
	tests := []struct {
		in   string
		want tensor.DType
	}{
		{"float32", tensor.Float32},
		{"float64", tensor.Float64},
		{"float16", tensor.Float16},
		{"bfloat16", tensor.BFloat16},
		{"int32", tensor.Int32},
		{"int64", tensor.Int64},
		{"uint8", tensor.Uint8},
		{"bool", tensor.Bool},
		// PyTorch's aliases and how str(torch.float32) prints.
		{"torch.float32", tensor.Float32},
		{"torch.bfloat16", tensor.BFloat16},
		{"float", tensor.Float32},
		{"torch.float", tensor.Float32},
		{"double", tensor.Float64},
		{"half", tensor.Float16},
		{"torch.half", tensor.Float16},
		{"long", tensor.Int64},
		{"int", tensor.Int32},
		{"Float32", tensor.Float32},
		{"TORCH.BFLOAT16", tensor.BFloat16},
	}
	for _, tc := range tests {
		got, err := tensor.ParseDType(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseDType(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "invalid", "float8", "int16", "torch.", "torch.short", "complex64", " float32", "float32 ", "f32", "torch.torch.float32"} {
		got, err := tensor.ParseDType(bad)
		if err == nil {
			t.Errorf("ParseDType(%q) = %v, want an error", bad, got)
			continue
		}
		if got != tensor.Invalid || !strings.Contains(err.Error(), "valid: float32") {
			t.Errorf("ParseDType(%q) = %v, %q; want Invalid and a list of valid names", bad, got, err)
		}
	}
}

func TestDTypeProperties(t *testing.T) {
	tests := []struct {
		d     tensor.DType
		name  string
		size  int
		float bool
	}{
		{tensor.Invalid, "invalid", 0, false},
		{tensor.Float32, "float32", 4, true},
		{tensor.Float64, "float64", 8, true},
		{tensor.Float16, "float16", 2, true},
		{tensor.BFloat16, "bfloat16", 2, true},
		{tensor.Int32, "int32", 4, false},
		{tensor.Int64, "int64", 8, false},
		{tensor.Uint8, "uint8", 1, false},
		{tensor.Bool, "bool", 1, false},
		{tensor.DType(200), "dtype(200)", 0, false},
	}
	for _, tc := range tests {
		if got := tc.d.String(); got != tc.name {
			t.Errorf("DType(%d).String() = %q, want %q", tc.d, got, tc.name)
		}
		if got := tc.d.Size(); got != tc.size {
			t.Errorf("%v.Size() = %d, want %d", tc.d, got, tc.size)
		}
		if got := tc.d.IsFloat(); got != tc.float {
			t.Errorf("%v.IsFloat() = %v, want %v", tc.d, got, tc.float)
		}
		// Every valid type's name parses back to it.
		if tc.size > 0 {
			if got, err := tensor.ParseDType(tc.d.String()); err != nil || got != tc.d {
				t.Errorf("ParseDType(%q) = %v, %v", tc.d.String(), got, err)
			}
		}
	}
}
