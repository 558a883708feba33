package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/internal/safefile"
)

// writeSnapshot writes s as JSON (the documented schema) or, for .pickle and
// .pkl files, as the pickle PyTorch's memory_viz page opens. The file is
// written through safefile: a crash leaves no half file and a planted
// symlink is not followed.
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
	if err := safefile.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("memory snapshot: %w", err)
	}
	return nil
}
