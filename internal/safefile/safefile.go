// Package safefile writes files atomically and durably. Every file headroom
// writes (checkpoints, memory snapshots, profiles) goes through it, so that
// a crash, a full disk or a planted symlink can never leave a torn file
// under the final name or overwrite a file elsewhere.
package safefile

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// File is a file being written for path: a temporary file in the same
// directory until Commit renames it over path.
type File struct {
	*os.File
	path, dir string
	perm      os.FileMode
	done      bool
}

// Create starts writing path with mode perm. The data goes to a new
// temporary file in the same directory, created exclusively under a random
// name (O_EXCL: a symlink or file already there is never opened, let alone
// followed). Call Commit to put it in place, or Abort to remove it; Abort
// after Commit does nothing, so it can be deferred.
func Create(path string, perm os.FileMode) (*File, error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	if base == "" {
		return nil, fmt.Errorf("writing %s: %w", path, os.ErrInvalid)
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return nil, err
	}
	return &File{File: tmp, path: path, dir: dir, perm: perm}, nil
}

// Commit syncs the file, renames it over path and syncs the directory, so
// that a crash leaves either the old file or the complete new one. rename
// replaces a symlink at path itself, not the file it points to. On error
// the temporary file is removed and path is left as it was.
func (f *File) Commit() (err error) {
	if f.done {
		return fmt.Errorf("writing %s: %w", f.path, os.ErrClosed)
	}
	f.done = true
	defer func() {
		if err != nil {
			f.File.Close()
			os.Remove(f.Name())
		}
	}()
	// CreateTemp makes the file 0600; set the mode asked for, unaffected
	// by the umask.
	if err = f.Chmod(f.perm); err != nil {
		return err
	}
	// Sync before rename: otherwise the rename can reach the disk before
	// the data does, and a crash leaves an empty or partial file.
	if err = f.Sync(); err != nil {
		return fmt.Errorf("writing %s: %w", f.path, err)
	}
	if err = f.File.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", f.path, err)
	}
	if err = os.Rename(f.Name(), f.path); err != nil {
		return err
	}
	// Make the rename itself durable. Not every platform or file system
	// can sync a directory, and the file is complete either way, so a
	// failure here is not reported.
	if d, derr := os.Open(f.dir); derr == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// Abort removes the temporary file, leaving path as it was; after Commit
// it does nothing.
func (f *File) Abort() {
	if f.done {
		return
	}
	f.done = true
	f.File.Close()
	os.Remove(f.Name())
}

// Write creates path with mode perm holding what fill writes, through
// Create and Commit; on any error, fill's included, nothing is left behind
// and path is unchanged.
func Write(path string, perm os.FileMode, fill func(w io.Writer) error) error {
	f, err := Create(path, perm)
	if err != nil {
		return err
	}
	if err := fill(f); err != nil {
		f.Abort()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Commit()
}

// WriteFile is Write of data: os.WriteFile made atomic and durable.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	return Write(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}
