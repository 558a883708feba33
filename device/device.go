// Package device is where bytes come from. A Device pairs an allocator with a
// memory source: the cpu device maps segments from the OS outside the Go
// heap, so that releasing them really returns memory; the meta device runs
// the same allocator on sizes alone, so planning and dry runs report the same
// byte counts without touching memory.
//
// The allocator is a caching allocator after PyTorch's CUDACachingAllocator
// (see Allocator): the same size rounding, pools, splitting and retry rules,
// the same statistics under the same names (Stats, MemoryStats, Summary),
// and the same snapshot layout (Snapshot, docs/snapshot-schema.md), with
// every allocation tagged by category, module path and op.
package device

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/headroom-ml/headroom/backend"
	"github.com/headroom-ml/headroom/cpu"
)

// Device is a place tensors live.
type Device struct {
	Kind  string // "cpu" or "meta"
	Alloc *Allocator
	// Backend runs the kernels of programs on the device (package exec
	// asks it for each node's kernel and workspace size). The cpu device
	// carries the cpu backend; so does the meta device, which runs nothing
	// but must plan the workspaces the cpu would. Tests may put another
	// backend here (backend/ref); a CUDA device would carry its own.
	Backend backend.Backend
}

// HasData reports whether the device holds real bytes (false for meta).
func (d *Device) HasData() bool { return d.Kind != "meta" }

func (d *Device) String() string {
	if c := d.Alloc.Capacity(); c > 0 {
		return fmt.Sprintf("%s:mem=%s", d.Kind, FormatBytes(c))
	}
	return d.Kind
}

// New parses a device spec: "cpu", "meta", "cpu:mem=2GiB". A capacity is
// parsed by ParseBytes, so it is a positive byte count: no spelling of it
// (0, NaN, an overflow) means "unlimited", which is the spec without mem=.
func New(spec string) (*Device, error) {
	kind, opts, hasOpts := strings.Cut(spec, ":")
	var capacity int64
	if hasOpts {
		seen := false
		for _, kv := range strings.Split(opts, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k != "mem" {
				return nil, fmt.Errorf("device %q: unknown option %q (valid: mem=SIZE)", spec, kv)
			}
			if seen {
				return nil, fmt.Errorf("device %q: mem= given twice", spec)
			}
			seen = true
			n, err := ParseBytes(v)
			if err != nil {
				return nil, fmt.Errorf("device %q: mem=: %w", spec, err)
			}
			capacity = n
		}
	}
	switch kind {
	case "cpu", "":
		return &Device{Kind: "cpu", Alloc: NewAllocator(hostSource(), capacity), Backend: cpu.Backend()}, nil
	case "meta":
		return &Device{Kind: "meta", Alloc: NewAllocator(metaSource{}, capacity), Backend: cpu.Backend()}, nil
	case "cuda":
		return nil, fmt.Errorf("device %q: the cuda device is planned but not built yet (valid: cpu, meta)", spec)
	}
	return nil, fmt.Errorf("unknown device %q (valid: cpu, meta, cpu:mem=SIZE)", spec)
}

// Capacity returns the mem= capacity a device spec names (0 when it names
// none), with the errors New gives, without creating an allocator.
func Capacity(spec string) (int64, error) {
	d, err := New(spec)
	if err != nil {
		return 0, err
	}
	return d.Alloc.Capacity(), nil
}

// CPU returns an unlimited cpu device.
func CPU() *Device { d, _ := New("cpu"); return d }

// Meta returns an unlimited meta device.
func Meta() *Device { d, _ := New("meta"); return d }

var units = []struct {
	suffix string
	mult   int64
}{{"EiB", 1 << 60}, {"PiB", 1 << 50}, {"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"EB", 1e18}, {"PB", 1e15}, {"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}, {"B", 1}}

// ErrSize is matched by errors.Is for every size ParseBytes refuses.
var ErrSize = errors.New("invalid size")

// sizeExamples ends every size error: what a size looks like.
const sizeExamples = "examples: 2GiB, 512MiB, 1.5G, 3GB, 1500000000"

// ParseBytes parses sizes like "2GiB", "512MiB", "1.5G" (binary for K/M/G),
// "3GB" (decimal) or a plain byte count. It is the one parser of sizes for
// every flag and spec: a size is a whole, positive number of bytes that
// fits in an int64, so NaN, Inf, hexadecimal, negative, zero (or less than
// one byte) and overflowing sizes are errors matching ErrSize, never a
// wrapped or "unlimited" value. A plain byte count must be whole; with a
// unit, a fraction of a byte left over (1.3KiB) is dropped.
func ParseBytes(s string) (int64, error) {
	bad := func(why string) error { return fmt.Errorf("%w %q: %s (%s)", ErrSize, s, why, sizeExamples) }
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range units {
		if len(t) > len(u.suffix) && strings.EqualFold(t[len(t)-len(u.suffix):], u.suffix) {
			t, mult = strings.TrimSpace(t[:len(t)-len(u.suffix)]), u.mult
			break
		}
	}
	if t == "" {
		return 0, bad("no number")
	}
	// Only plain decimal notation: ParseFloat alone would also take NaN,
	// Inf, hexadecimal floats and underscores.
	for i, c := range t {
		switch {
		case c >= '0' && c <= '9', c == '.':
		case c == 'e' || c == 'E':
		case (c == '+' || c == '-') && (i == 0 || t[i-1] == 'e' || t[i-1] == 'E'):
		default:
			return 0, bad("not a decimal number")
		}
	}
	if t[0] == '-' {
		return 0, bad("negative")
	}
	// Whole numbers are read exactly (a float64 would round above 2^53).
	if n, err := strconv.ParseUint(strings.TrimPrefix(t, "+"), 10, 64); err == nil {
		if n == 0 {
			return 0, bad("zero")
		}
		if n > math.MaxInt64/uint64(mult) {
			return 0, bad("too large (more than 8 EiB)")
		}
		return int64(n) * mult, nil
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, bad("not a number")
	}
	v := f * float64(mult)
	if mult == 1 && v != math.Trunc(v) && v < math.MaxInt64 {
		return 0, bad("a fraction of a byte (give a unit, as 1.5GiB, or a whole byte count)")
	}
	switch {
	case math.IsNaN(v) || f < 0:
		return 0, bad("not a number")
	case v >= math.MaxInt64: // float64(MaxInt64) is 2^63: no int64 is this large
		return 0, bad("too large (more than 8 EiB)")
	case v < 1:
		return 0, bad("less than one byte")
	}
	return int64(v), nil
}

// FormatBytes prints a byte count in binary units: "1.50 GiB", "512 B".
func FormatBytes(n int64) string {
	sign, u := "", uint64(n)
	if n < 0 {
		sign, u = "-", -u // two's complement: exact for MinInt64 too
	}
	units := [...]string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	for i := len(units) - 1; i >= 0; i-- {
		if unit := uint64(1) << (10 * (i + 1)); u >= unit {
			return fmt.Sprintf("%s%.2f %s", sign, float64(u)/float64(unit), units[i])
		}
	}
	return fmt.Sprintf("%s%d B", sign, u)
}
