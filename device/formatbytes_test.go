package device

import (
	"math"
	"testing"
)

func TestFormatBytes(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{0, "0 B"},
		{1023, "1023 B"},
		{1024, "1.00 KiB"},
		{-1536, "-1.50 KiB"},
		{10 << 20, "10.00 MiB"},
		{3 << 30, "3.00 GiB"},
		{1 << 40, "1.00 TiB"},
		{5 << 50, "5.00 PiB"},
		{math.MaxInt64, "8.00 EiB"},
		{math.MinInt64, "-8.00 EiB"},
	} {
		if got := FormatBytes(tc.n); got != tc.want {
			t.Errorf("FormatBytes(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}
