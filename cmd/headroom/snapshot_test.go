package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/headroom-ml/headroom/memviz"
)

// --memory-snapshot PATH must not write through a symlink planted at
// PATH.tmp (the old fixed temporary name) or at PATH, must leave no
// temporary file, and must write the whole snapshot.
func TestWriteSnapshotIgnoresPlantedSymlinks(t *testing.T) {
	s := testSnapshot(t)
	for _, name := range []string{"s.json", "s.pickle"} {
		for _, planted := range []string{name + ".tmp", name} {
			dir := t.TempDir()
			victim := filepath.Join(dir, "victim")
			if err := os.WriteFile(victim, []byte("precious"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(victim, filepath.Join(dir, planted)); err != nil {
				t.Skip("no symlinks:", err)
			}
			path := filepath.Join(dir, name)
			if err := writeSnapshot(path, s); err != nil {
				t.Fatalf("%s with a link at %s: %v", name, planted, err)
			}
			if got, _ := os.ReadFile(victim); string(got) != "precious" {
				t.Fatalf("%s with a link at %s: the victim was overwritten (%d bytes)", name, planted, len(got))
			}
			if st, err := os.Lstat(path); err != nil || !st.Mode().IsRegular() {
				t.Fatalf("%s with a link at %s: %v %v, want a regular file", name, planted, st, err)
			}
			if _, err := memviz.ReadFile(path); err != nil {
				t.Fatalf("%s with a link at %s: %v", name, planted, err)
			}
			des, _ := os.ReadDir(dir)
			for _, de := range des {
				if de.Name() != name && de.Name() != "victim" && de.Name() != planted {
					t.Errorf("left %s behind", de.Name())
				}
			}
		}
	}
}

// A snapshot that cannot be written leaves nothing behind.
func TestWriteSnapshotFailureLeavesNoTemp(t *testing.T) {
	dir := t.TempDir()
	// The target is a non-empty directory: rename fails after the data
	// was written to the temporary file.
	path := filepath.Join(dir, "s.json")
	if err := os.MkdirAll(filepath.Join(path, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := writeSnapshot(path, testSnapshot(t)); err == nil {
		t.Fatal("writing over a directory succeeded")
	}
	des, _ := os.ReadDir(dir)
	if len(des) != 1 {
		var names []string
		for _, de := range des {
			names = append(names, de.Name())
		}
		t.Errorf("directory holds %v, want only s.json", names)
	}
}
