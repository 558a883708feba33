// Package env is the one place headroom reads its environment variables:
// every knob is listed here with what it does, and read through a typed
// accessor that says what is wrong with a bad value instead of ignoring it.
// The packages a knob configures call these accessors; nothing else in the
// module calls os.Getenv for a HEADROOM_ variable (test-only switches
// aside).
//
// Most knobs are read at start-up, before `go test` begins to record the
// environment a test reads, so its cache does not key on them: run tests
// with -count=1 after setting one.
package env

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// The knobs.
const (
	// NumThreads is the default number of threads CPU kernels split loops
	// across (a positive integer; default: all cores). Read by
	// internal/parallel at start-up.
	NumThreads = "HEADROOM_NUM_THREADS"
	// Fuse turns the fusion pass off when false ("0"), for comparisons.
	// Read by transform.Fuse on every call.
	Fuse = "HEADROOM_FUSE"
	// SGEMMKernel names the float32 matrix-multiply kernel to use (avx512,
	// avx2, go); an unknown or unsupported name keeps the best one. Read
	// by cpu/internal/gemm at start-up.
	SGEMMKernel = "HEADROOM_SGEMM_KERNEL"
	// Winograd turns the Winograd convolution of the cpu backend off when
	// false ("0"), for comparisons and for the direct paths' rounding; an
	// invalid value turns it off too. Read by cpu at start-up.
	Winograd = "HEADROOM_WINOGRAD"
	// BF16Native turns the native bfloat16 matrix-multiply kernel
	// (VDPBF16PS) off when false ("0"): bf16 products are then widened to
	// float32 and run on the float32 kernel, for comparisons; an invalid
	// value turns it off too. Read by cpu/internal/gemm at start-up.
	BF16Native = "HEADROOM_BF16_NATIVE"
	// ConvBF16 chooses which bf16-mixed convolutions run on the native
	// bf16 kernel, for measurements: a comma-separated list of fwd
	// (forward), bwi (input gradient), bww (weight gradient), or none
	// (default: bww, the one measured faster than the float32 kernels);
	// a value with another word keeps the default. Read by cpu at
	// start-up.
	ConvBF16 = "HEADROOM_CONV_BF16"
	// MaxISA limits the vector extensions every kernel may use to those of
	// a narrower CPU (none, avx2, avx512, avx512_bf16, all), as if the
	// machine had no more: for comparing with an AVX2 machine on an
	// AVX-512 one. An unknown value is ignored (bench says so). Read by
	// internal/cpuid at start-up.
	MaxISA = "HEADROOM_MAX_ISA"
	// FashionMNIST is a directory holding the Fashion-MNIST IDX files.
	// Read by dataset.Locate.
	FashionMNIST = "HEADROOM_FASHION_MNIST"
)

// Knobs lists every knob with a one-line description (for help texts).
var Knobs = []struct{ Name, Doc string }{
	{NumThreads, "threads for CPU kernels, a positive integer (default: all cores)"},
	{Fuse, "0 turns off the fusion of elementwise ops"},
	{SGEMMKernel, "float32 matrix-multiply kernel: avx512, avx2 or go (default: the best this CPU runs)"},
	{Winograd, "0 turns off Winograd 3x3 convolutions on the cpu (default on where faster)"},
	{BF16Native, "0 turns off the native bf16 matrix-multiply kernel (default on where the CPU has AVX512_BF16)"},
	{ConvBF16, "bf16-mixed convolutions on the native bf16 kernel: a list of fwd, bwi, bww, or none (default: bww)"},
	{MaxISA, "widest vector extensions kernels may use: none, avx2, avx512, avx512_bf16 or all (default: all the CPU has)"},
	{FashionMNIST, "directory with the Fashion-MNIST IDX files"},
}

// ErrValue is matched by errors.Is for every value refused.
var ErrValue = errors.New("invalid environment value")

// Error is a variable whose value is not of the kind its knob wants.
type Error struct {
	Name, Value string
	Want        string // what it should be, e.g. "a positive integer"
}

func (e *Error) Error() string {
	return fmt.Sprintf("$%s=%q: want %s", e.Name, e.Value, e.Want)
}

func (e *Error) Is(t error) bool { return t == ErrValue }

// Lookup returns the variable's value; an empty value is unset, as for
// the other variables headroom reads.
func Lookup(name string) (string, bool) {
	v := os.Getenv(name)
	return v, v != ""
}

// Int returns the variable as an integer of at least lo, or def when it
// is unset.
func Int(name string, def, lo int) (int, error) {
	s, ok := Lookup(name)
	if !ok {
		return def, nil
	}
	v, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || v < lo {
		want := fmt.Sprintf("an integer of at least %d", lo)
		if lo == 1 {
			want = "a positive integer"
		}
		return def, &Error{Name: name, Value: s, Want: want}
	}
	return v, nil
}

// Bool returns the variable as a switch, or def when it is unset:
// 1, true, on and yes are true; 0, false, off and no are false (any case).
func Bool(name string, def bool) (bool, error) {
	s, ok := Lookup(name)
	if !ok {
		return def, nil
	}
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "1", "true", "on", "yes":
		return true, nil
	case "0", "false", "off", "no":
		return false, nil
	}
	return def, &Error{Name: name, Value: s, Want: "0 or 1 (false or true)"}
}
