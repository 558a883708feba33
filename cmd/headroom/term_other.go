//go:build !unix

package main

import "os"

// terminalWidth reports no terminal: progress is shown as plain lines.
func terminalWidth(*os.File) (int, bool) { return 0, false }
