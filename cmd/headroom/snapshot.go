package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/headroom-ml/headroom/device"
)

// writeSnapshot writes s as JSON (the documented schema) or, for .pickle and
// .pkl files, as the pickle PyTorch's memory_viz page opens. The file is
// written next to its final name and renamed, so a crash leaves no half file.
func writeSnapshot(path string, s *device.Snapshot) error {
	var data []byte
	var err error
	switch strings.ToLower(filepath.Ext(path)) {
	case ".pickle", ".pkl":
		data, err = snapshotPickle(s)
	default:
		data, err = json.Marshal(s)
	}
	if err != nil {
		return fmt.Errorf("memory snapshot %s: %w", path, err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("memory snapshot: %w", err)
	}
	return os.Rename(tmp, path)
}
