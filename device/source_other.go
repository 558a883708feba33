//go:build !(linux || darwin || freebsd || netbsd || openbsd || windows)

package device

// hostSource is the source of the cpu device's memory: the Go heap, where
// headroom maps no memory of its own.
func hostSource() source { return heapSource{} }
