package parallel

import (
	"bytes"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
)

func testGoid() int64 {
	var buf [64]byte
	s := buf[:runtime.Stack(buf[:], false)]
	s = bytes.TrimPrefix(s, []byte("goroutine "))
	id, _ := strconv.ParseInt(string(s[:bytes.IndexByte(s, ' ')]), 10, 64)
	return id
}

// Nested calls still run inline on the calling goroutine (no new threads
// per level), from the caller's goroutine and from the workers alike.
func TestForNestedRunsInline(t *testing.T) {
	defer SetThreads(SetThreads(3))
	var bad atomic.Int64
	For(6, 1, func(lo, hi int) {
		outer := testGoid()
		For(50, 1, func(lo, hi int) {
			if testGoid() != outer {
				bad.Add(1)
			}
		})
	})
	if bad.Load() != 0 {
		t.Fatalf("%d nested ranges ran on another goroutine than their caller", bad.Load())
	}
}
