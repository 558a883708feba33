package bench

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Memory is a process's resident memory as /proc/self/status reports it.
type Memory struct {
	RSS  int64 // VmRSS: resident now, bytes
	Peak int64 // VmHWM: the peak resident since start or the last reset, bytes
}

// ParseStatus reads VmRSS and VmHWM from the text of /proc/<pid>/status.
func ParseStatus(r io.Reader) (Memory, error) {
	var m Memory
	var haveRSS, havePeak bool
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		n, err := parseKB(val)
		if err != nil {
			return Memory{}, fmt.Errorf("bench: %s: %w", key, err)
		}
		if key == "VmRSS" {
			m.RSS, haveRSS = n, true
		} else {
			m.Peak, havePeak = n, true
		}
	}
	if err := sc.Err(); err != nil {
		return Memory{}, err
	}
	if !haveRSS || !havePeak {
		return Memory{}, fmt.Errorf("bench: process status has no VmRSS/VmHWM lines")
	}
	return m, nil
}

// parseKB parses "   1234 kB" into bytes.
func parseKB(s string) (int64, error) {
	f := strings.Fields(s)
	if len(f) != 2 || f[1] != "kB" {
		return 0, fmt.Errorf("unexpected value %q", strings.TrimSpace(s))
	}
	n, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("unexpected value %q", strings.TrimSpace(s))
	}
	return n * 1024, nil
}

// ReadMemory returns this process's resident memory.
func ReadMemory() (Memory, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return Memory{}, err
	}
	defer f.Close()
	return ParseStatus(f)
}

// ResetPeak resets this process's peak resident memory (VmHWM) to the
// current resident memory by writing 5 to /proc/self/clear_refs (Linux
// 4.0+). It reports whether the reset worked.
func ResetPeak() bool {
	before, err := ReadMemory()
	if err != nil {
		return false
	}
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		return false
	}
	after, err := ReadMemory()
	// The peak is now the resident memory of the moment of the reset,
	// which the runtime may have changed a little since the first reading.
	return err == nil && after.Peak <= max(before.RSS, after.RSS)+1<<20
}
