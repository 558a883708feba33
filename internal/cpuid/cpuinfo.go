package cpuid

import (
	"bufio"
	"io"
	"os"
	"strings"
)

// CPUInfo is what Linux's /proc/cpuinfo says of the first processor.
type CPUInfo struct {
	ModelName string          // "model name" (x86), else "Model"/"CPU part" hints
	Vendor    string          // "vendor_id"
	Flags     map[string]bool // "flags" (x86) or "Features" (arm64)
}

// Has reports whether flag (e.g. "avx512_bf16") is listed.
func (c CPUInfo) Has(flag string) bool { return c.Flags[flag] }

// ParseCPUInfo reads the first processor's block of /proc/cpuinfo text.
// Unknown lines are ignored; a block without a model name gives "".
func ParseCPUInfo(r io.Reader) (CPUInfo, error) {
	info := CPUInfo{Flags: map[string]bool{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20) // flags lines are long
	seen := false
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			if seen {
				break // end of the first processor's block
			}
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		seen = true
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch k {
		case "model name":
			info.ModelName = cleanBrand(v)
		case "Model": // arm64 and some boards: a name where x86 says "model name"
			if info.ModelName == "" {
				info.ModelName = cleanBrand(v)
			}
		case "vendor_id":
			info.Vendor = v
		case "flags", "Features":
			for _, f := range strings.Fields(v) {
				info.Flags[f] = true
			}
		}
	}
	return info, sc.Err()
}

// ReadCPUInfo parses /proc/cpuinfo (an error off Linux).
func ReadCPUInfo() (CPUInfo, error) {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return CPUInfo{}, err
	}
	defer f.Close()
	return ParseCPUInfo(f)
}

// ModelName is the processor's name: CPUID's brand string, else
// /proc/cpuinfo's model name, else "unknown CPU".
func ModelName() string {
	if b := Brand(); b != "" {
		return b
	}
	if info, err := ReadCPUInfo(); err == nil && info.ModelName != "" {
		return info.ModelName
	}
	return "unknown CPU"
}

// cleanBrand trims the NULs and runs of spaces brand strings are padded with.
func cleanBrand(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == 0 {
			return ' '
		}
		return r
	}, s)
	return strings.Join(strings.Fields(s), " ")
}
