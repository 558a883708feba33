package idx

import (
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// A gzip file's data is bounded by its compressed size (MaxGzipRatio):
// 200 MB of zeros compress to 200 KB, and a header declaring them was
// read in full (up to MaxDataBytes, 4 GiB, from 4 MB of gzip).
func TestGzipBombRefused(t *testing.T) {
	const n = 200 << 20
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write([]byte{0, 0, 0x08, 2, 0, 0, 0x08, 0, 0, 0x01, 0x90, 0}) // ubyte [2048, 102400]
	zero := make([]byte, 1<<20)
	for range n >> 20 {
		zw.Write(zero)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "bomb.idx.gz")
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := ReadFile(path)
	var fe *FormatError
	if !errors.As(err, &fe) {
		t.Fatalf("%d bytes of gzip declaring %d: %v, want a *FormatError", buf.Len(), n, err)
	}
}
