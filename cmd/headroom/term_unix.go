//go:build unix

package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// terminalWidth reports whether f is a terminal and its width in columns.
// The window-size request fails on anything else (a file, a pipe,
// /dev/null), which is what tells a terminal from them.
func terminalWidth(f *os.File) (int, bool) {
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0, false
	}
	if ws.Col == 0 {
		return 80, true // a terminal that does not say
	}
	return int(ws.Col), true
}
