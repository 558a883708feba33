package safetensors

import "github.com/headroom-ml/headroom/tensor"

// codes maps headroom's element types to safetensors dtype codes. rank is the
// position of the code in the reference implementation's Dtype enum, which
// is ordered by alignment; its writer lays tensors out by descending rank and
// then by name, so every tensor's data is aligned to its element size. We use
// the same order so our files are byte-identical to the reference's.
var codes = map[tensor.DType]struct {
	code string
	rank int
}{
	tensor.Bool:     {"BOOL", 0},
	tensor.Uint8:    {"U8", 1},
	tensor.Float16:  {"F16", 7},
	tensor.BFloat16: {"BF16", 8},
	tensor.Int32:    {"I32", 9},
	tensor.Float32:  {"F32", 11},
	tensor.Float64:  {"F64", 12},
	tensor.Int64:    {"I64", 13},
}

// unsupported lists codes that are valid safetensors but have no headroom
// element type, so the error can say "not supported" rather than "unknown".
var unsupported = map[string]bool{
	"I8": true, "I16": true, "U16": true, "U32": true, "U64": true,
	"F8_E5M2": true, "F8_E4M3": true, "F8_E8M0": true, "F4": true,
	"F6_E2M3": true, "F6_E3M2": true, "C64": true,
}

func parseCode(s string) (tensor.DType, bool) {
	for dt, c := range codes {
		if c.code == s {
			return dt, true
		}
	}
	return tensor.Invalid, false
}

// supportedCodes is the list quoted in error messages.
const supportedCodes = "F32, F64, F16, BF16, I32, I64, U8, BOOL"
