package safefile

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// entries lists dir's names, to find leftover temporary files.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

func TestWriteFileContentAndMode(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.bin")
	data := bytes.Repeat([]byte("headroom"), 1<<17) // 1 MiB
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes, want the %d written", len(got), len(data))
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", st.Mode().Perm())
	}
	if names := entries(t, dir); len(names) != 1 {
		t.Errorf("directory holds %v, want only out.bin", names)
	}
}

// A symlink planted at the old predictable temporary name (PATH.tmp) or at
// the target itself must not lead the write to another file.
func TestWriteDoesNotFollowPlantedSymlinks(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, link string }{
		{"temp name", "snap.json.tmp"},
		{"target", "snap.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "snap.json")
			os.Remove(path)
			os.Remove(path + ".tmp")
			if err := os.Symlink(victim, filepath.Join(dir, tc.link)); err != nil {
				t.Skip("no symlinks:", err)
			}
			if err := WriteFile(path, []byte("new content"), 0o644); err != nil {
				t.Fatal(err)
			}
			if got, _ := os.ReadFile(victim); string(got) != "precious" {
				t.Fatalf("victim now holds %q: the write followed the symlink", got)
			}
			st, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			if !st.Mode().IsRegular() {
				t.Fatalf("%s is %v, want a regular file", path, st.Mode())
			}
			if got, _ := os.ReadFile(path); string(got) != "new content" {
				t.Fatalf("%s holds %q", path, got)
			}
		})
	}
}

func TestWriteFailureLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ckpt.safetensors")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := Write(path, 0o644, func(w io.Writer) error {
		w.Write([]byte("partial"))
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
	if got, _ := os.ReadFile(path); string(got) != "old" {
		t.Errorf("target holds %q after a failed write, want the old content", got)
	}
	if names := entries(t, dir); len(names) != 1 {
		t.Errorf("directory holds %v after a failed write, want only the target", names)
	}
}

func TestWriteMissingDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no", "such", "dir", "x")
	err := WriteFile(path, []byte("x"), 0o644)
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("err = %v, want ErrNotExist", err)
	}
}

func TestWriteDirectoryPath(t *testing.T) {
	dir := t.TempDir()
	err := WriteFile(dir+string(filepath.Separator), []byte("x"), 0o644)
	if err == nil {
		t.Fatal("writing to a directory name succeeded")
	}
	if names := entries(t, dir); len(names) != 0 {
		t.Errorf("left %v", names)
	}
	if strings.Contains(err.Error(), "tmp-") {
		t.Errorf("error names the temporary file: %v", err)
	}
}

// A file written over time (a profile) appears under its name only once
// committed; aborted, it leaves nothing.
func TestCreateCommitAbort(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cpu.prof")
	victim := filepath.Join(dir, "victim")
	os.WriteFile(victim, []byte("precious"), 0o600)
	if err := os.Symlink(victim, path); err != nil {
		t.Skip(err)
	}
	f, err := Create(path, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Abort()
	f.Write([]byte("profile"))
	if got, _ := os.ReadFile(victim); string(got) != "precious" {
		t.Fatalf("victim holds %q while the file is written", got)
	}
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	f.Abort() // after Commit: nothing
	if got, _ := os.ReadFile(path); string(got) != "profile" {
		t.Fatalf("%s holds %q", path, got)
	}
	if got, _ := os.ReadFile(victim); string(got) != "precious" {
		t.Fatalf("victim holds %q", got)
	}
	if err := f.Commit(); err == nil {
		t.Error("a second Commit succeeded")
	}

	g, err := Create(filepath.Join(dir, "aborted"), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	g.Write([]byte("x"))
	g.Abort()
	if names := entries(t, dir); len(names) != 2 {
		t.Errorf("after Abort the directory holds %v", names)
	}
}
