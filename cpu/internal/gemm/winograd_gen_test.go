package gemm

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The checked-in winograd_amd64.s is gen_winograd.go's output: an edit
// made to the assembly and not to the generator (or the other way round)
// fails here, not at the next `go generate`.
func TestWinogradAsmIsGenerated(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to run the generator")
	}
	out := filepath.Join(t.TempDir(), "winograd_amd64.s")
	if msg, err := exec.Command(gobin, "run", "gen_winograd.go", "-o", out).CombinedOutput(); err != nil {
		t.Fatalf("go run gen_winograd.go: %v\n%s", err, msg)
	}
	want, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("winograd_amd64.s")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		line := 1 + bytes.Count(got[:commonPrefix(got, want)], []byte("\n"))
		t.Fatalf("winograd_amd64.s differs from gen_winograd.go's output from line %d: run go generate ./cpu/internal/gemm/", line)
	}
}

func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
