// Package safefile writes files atomically and durably. Every file headroom
// writes (checkpoints, memory snapshots) goes through Write, so that a
// crash, a full disk or a planted symlink can never leave a torn file under
// the final name or overwrite a file elsewhere.
package safefile

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Write creates path with mode perm holding what fill writes. The data goes
// to a new temporary file in the same directory, created exclusively under
// a random name (O_EXCL: a symlink or file already there is never opened,
// let alone followed), then is synced, renamed over path and the directory
// synced. A crash leaves either the old file or the complete new one. On
// any error the temporary file is removed and path is left as it was.
//
// rename replaces a symlink at path itself rather than the file it points
// to, so a link planted under the final name is not followed either.
func Write(path string, perm os.FileMode, fill func(w io.Writer) error) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	if base == "" {
		return fmt.Errorf("writing %s: %w", path, os.ErrInvalid)
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err = fill(tmp); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	// CreateTemp makes the file 0600; set the mode asked for, unaffected
	// by the umask, as the previous file had no say either way.
	if err = tmp.Chmod(perm); err != nil {
		return err
	}
	// Sync before rename: otherwise the rename can reach the disk before
	// the data does, and a crash leaves an empty or partial file.
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	// Make the rename itself durable. Not every platform or file system
	// can sync a directory, and the file is complete either way, so a
	// failure here is not reported.
	if d, derr := os.Open(dir); derr == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// WriteFile is Write of data: os.WriteFile made atomic and durable.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	return Write(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}
