package main

import (
	"errors"

	"github.com/headroom-ml/headroom/device"
)

func snapshotPickle(s *device.Snapshot) ([]byte, error) {
	return nil, errors.New("pickle export is not available yet; use a .json file")
}
