package dataset

import (
	"bufio"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// mappedRSS is the resident bytes of this process's mappings of path
// (/proc/self/smaps).
func mappedRSS(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skipf("no /proc/self/smaps: %v", err)
	}
	defer f.Close()
	var total int64
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		if fields := strings.Fields(l); len(fields) > 0 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			in = strings.HasSuffix(l, " "+path)
			continue
		}
		if v, ok := strings.CutPrefix(l, "Rss:"); ok && in {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			total += kb << 10
		}
	}
	return total
}

// A pass over a token file in shuffled order leaves nothing of it
// resident in the process (the page cache holds it, outside the
// process's memory): windows are read, not faulted in through the
// mapping, which maps whole page-cache folios, up to 2 MiB a fault.
func TestTokenFileNotResident(t *testing.T) {
	if runtime.GOOS != "linux" || !mapped {
		t.Skip("reads /proc/self/smaps of a mapped file")
	}
	tokens := make([]int64, 8<<20) // 16 MiB of uint16
	for i := range tokens {
		tokens[i] = int64(i * 7 % 65)
	}
	path := writeTokens(t, tokens, 2)
	f, err := OpenTokens(path, TokenOptions{Context: 256})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.ResidentBytes() != 0 {
		t.Errorf("ResidentBytes %d, want 0", f.ResidentBytes())
	}
	order := Sampler{N: f.Len(), BatchSize: 1, Shuffle: true, Seed: 3}.Order(0)
	var ex Example
	for _, i := range order {
		if err := f.Get(i, &ex); err != nil {
			t.Fatal(err)
		}
		if ex.Tokens[0] != tokens[i*256] || ex.Y[255] != tokens[i*256+256] {
			t.Fatalf("window %d: %v ... %v", i, ex.Tokens[0], ex.Y[255])
		}
	}
	// Reading the header maps the first folio (up to 2 MiB), no more.
	if rss := mappedRSS(t, path); rss > 2<<20 {
		t.Errorf("after a shuffled pass %d KiB of the 16 MiB file are resident in the process", rss>>10)
	}
}
