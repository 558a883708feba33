package device

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
)

// Every spelling of a size that is not a positive int64 is an error, never
// a wrapped, zero or "unlimited" value.
func TestParseBytesRefuses(t *testing.T) {
	for _, in := range []string{
		"", " ", "GiB", "NaN", "nan", "Inf", "+Inf", "-Inf", "infinity", "NaNGiB", "InfMiB",
		"1e99", "1e99GiB", "1e400", "9223372036854775808", "18446744073709551616",
		"9223372036854775807KiB", "8589934592GiB", "9.3e18",
		"0", "0B", "0GiB", "0.0", "0.4", "1e-10GiB", "1e-400",
		"-1", "-0", "-1MiB", "- 1", "0x10", "0x1p4", "1_000", "1,000", "1..2", "1e", "e5", ".", "+",
		"1 2", "12 MiB MiB", "2XB",
		"1.5", "1.9", "8EiB", "9.3EB", // a fraction of a byte; more than 8 EiB with the larger units
	} {
		n, err := ParseBytes(in)
		if err == nil {
			t.Errorf("ParseBytes(%q) = %d, want an error", in, n)
			continue
		}
		if !errors.Is(err, ErrSize) || !strings.Contains(err.Error(), "examples") {
			t.Errorf("ParseBytes(%q): error %v does not match ErrSize or give examples", in, err)
		}
	}
}

func TestParseBytesLimits(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"9223372036854775807", math.MaxInt64}, // exact, not rounded through a float64
		{"9007199254740993", 9007199254740993},
		{"8589934591GiB", 8589934591 << 30},
		{"1", 1},
		{"1.0", 1},
		{"1.3KiB", 1331}, // with a unit, the fraction of a byte left over is dropped
		{"1EiB", 1 << 60},
		{"7.5EiB", 15 << 59},
		{"2PiB", 2 << 50},
		{"2PB", 2e15},
		{"+5KiB", 5 << 10},
		{"1e3", 1000},
		{"1E3KiB", 1000 << 10},
		{"2.5e-1KiB", 256},
	} {
		got, err := ParseBytes(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
}

// A capacity that does not parse is an error, not an unlimited device.
func TestNewDeviceRefusesBadCapacity(t *testing.T) {
	for _, spec := range []string{"cpu:mem=1e99", "cpu:mem=NaN", "cpu:mem=0", "cpu:mem=", "cpu:mem=-1GiB", "meta:mem=Inf",
		"cpu:mem=9223372036854775808", "cpu:mem=1GiB,mem=2GiB", "cpu:", "meta:"} {
		d, err := New(spec)
		if err == nil {
			t.Errorf("New(%q) = %v, want an error", spec, d)
		}
	}
	for spec, want := range map[string]int64{"cpu": 0, "meta": 0, "cpu:mem=1MiB": 1 << 20, "meta:mem=3GB": 3e9} {
		if c, err := Capacity(spec); err != nil || c != want {
			t.Errorf("Capacity(%q) = %d, %v; want %d", spec, c, err, want)
		}
	}
}

// FuzzParseBytes: whatever the input, a size is positive, or an error; a
// parsed size printed in bytes parses back to itself.
func FuzzParseBytes(f *testing.F) {
	for _, s := range []string{"2GiB", "512MiB", "1.5G", "3GB", "1000", "12 KiB", "NaN", "1e99", "-1", "0", "9223372036854775807", "0x1p3", "1e-3KiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseBytes(s)
		if err != nil {
			if n != 0 || !errors.Is(err, ErrSize) {
				t.Fatalf("ParseBytes(%q) = %d, %v", s, n, err)
			}
			return
		}
		if n < 1 {
			t.Fatalf("ParseBytes(%q) = %d, accepted", s, n)
		}
		if back, err := ParseBytes(strconv.FormatInt(n, 10)); err != nil || back != n {
			t.Fatalf("ParseBytes(%q) = %d, which reads back as %d, %v", s, n, back, err)
		}
	})
}
