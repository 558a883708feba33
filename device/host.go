package device

import (
	"fmt"
	"sync"
)

// HostPool is host memory outside the device budget for offloaded
// activations: its own allocator (a cpu device used as "host"), with the
// allocator's statistics (Device.Alloc) to see what it holds. It is bound
// to a run (exec.Options.Host), not to the graph: the graph's offload
// nodes name only what moves, and each run says where it goes.
type HostPool struct {
	Device *Device
	mu     sync.Mutex
	blocks map[any]*Block
}

// NewHostPool returns a pool allocating from dev (CPU() for a real host
// pool).
func NewHostPool(dev *Device) *HostPool {
	return &HostPool{Device: dev, blocks: map[any]*Block{}}
}

var defaultHost = sync.OnceValue(func() *HostPool { return NewHostPool(CPU()) })

// DefaultHost is the process-wide host pool, used by runs that bind none.
func DefaultHost() *HostPool { return defaultHost() }

// Put copies data out under key (op.HostStore).
func (h *HostPool) Put(key any, data []byte) error {
	b, err := h.Device.Alloc.Allocate(int64(len(data)), Tag{Category: Activation, Op: "offload"})
	if err != nil {
		return fmt.Errorf("host pool: %w", err)
	}
	copy(b.Data, data)
	h.mu.Lock()
	old := h.blocks[key]
	h.blocks[key] = b
	h.mu.Unlock()
	if old != nil { // left by a step that failed before reloading
		h.Device.Alloc.Free(old)
	}
	return nil
}

// Take copies what was put under key into dst and forgets it
// (op.HostStore).
func (h *HostPool) Take(key any, dst []byte) error {
	h.mu.Lock()
	b := h.blocks[key]
	delete(h.blocks, key)
	h.mu.Unlock()
	if b == nil {
		return fmt.Errorf("host pool: nothing was offloaded under this key")
	}
	copy(dst, b.Data)
	h.Device.Alloc.Free(b)
	return nil
}

// Held is the number of tensors the pool holds.
func (h *HostPool) Held() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.blocks)
}
