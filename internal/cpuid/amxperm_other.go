//go:build !linux || !amd64 || purego

package cpuid

import (
	"errors"
	"runtime"
)

// requestAMX: AMX permission is only asked for on linux/amd64 builds with
// assembly; elsewhere the tiles stay off.
func requestAMX() error {
	return errors.New("AMX is used only on linux/amd64 without purego (this build: " + runtime.GOOS + "/" + runtime.GOARCH + ")")
}
