package main

import (
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/memviz"
)

// snapshotPickle writes s as the pickle PyTorch's memory_viz page opens.
func snapshotPickle(s *device.Snapshot) ([]byte, error) {
	return memviz.Pickle(s)
}
