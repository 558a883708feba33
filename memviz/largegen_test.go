package memviz_test

import (
	"bufio"
	"encoding/binary"
	"io"
	"math"
	"strconv"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/memviz"
)

// Layout of the benchmark's run (see largeSnapshot).
const (
	largeBase    = int64(1) << 36
	largeSegSize = int64(8) << 30
	largeParams  = int64(256) << 20
	largeT0      = int64(1764443426000000)
)

// largeEvents yields the history of largeSnapshot in order, without
// holding it: steps steps, each allocating and freeing perStep activations
// (and a temporary for each) of 48 modules, bracketed by step markers,
// after the segment and the parameters. Entries carry the frame headroom's
// writer gives module and op, as a recorded run's do.
func largeEvents(steps, perStep int, yield func(memviz.Event)) {
	t := largeT0
	add := func(e memviz.Event) {
		t += 3
		e.TimeUS = t
		if e.Module != "" {
			e.Frames = []memviz.Frame{{Filename: e.Module, Name: e.Op}}
		}
		yield(e)
	}
	add(memviz.Event{Action: device.ActionSegmentAlloc, Addr: largeBase, Size: largeSegSize, Pool: "large"})
	add(memviz.Event{Action: device.ActionAlloc, Addr: largeBase, Size: largeParams, BlockSize: largeParams, Pool: "large", Category: "parameter", Module: "model", Op: "weights"})
	sizes := make([]int64, perStep)
	for s := 1; s <= steps; s++ {
		add(memviz.Event{Action: device.ActionStepBegin, Step: int64(s)})
		at := largeBase + largeParams
		for j := range perStep {
			sizes[j] = int64(512 * (1 + (j*7919+s)%4096))
			mod := "layers." + strconv.Itoa(j%48)
			add(memviz.Event{Action: device.ActionAlloc, Addr: at, Size: sizes[j], BlockSize: sizes[j], Pool: "large", Category: "activation", Module: mod, Op: "conv2d"})
			add(memviz.Event{Action: device.ActionAlloc, Addr: at + sizes[j], Size: 4096, BlockSize: 4096, Pool: "large", Category: "temporary", Module: mod, Op: "im2col"})
			add(memviz.Event{Action: device.ActionFree, Addr: at + sizes[j], Size: 4096, BlockSize: 4096, Pool: "large", Category: "temporary", Module: mod, Op: "im2col"})
			at += sizes[j]
		}
		for j := perStep - 1; j >= 0; j-- {
			at -= sizes[j]
			add(memviz.Event{Action: device.ActionFree, Addr: at, Size: sizes[j], BlockSize: sizes[j], Pool: "large", Category: "activation", Module: "layers." + strconv.Itoa(j%48), Op: "conv2d"})
		}
		add(memviz.Event{Action: device.ActionStepEnd, Step: int64(s)})
	}
}

func largeSegment() memviz.Segment {
	return memviz.Segment{Address: largeBase, TotalSize: largeSegSize, Type: "large", Blocks: []memviz.Block{
		{Address: largeBase, Size: largeParams, Requested: largeParams, State: device.StateActiveAllocated, Category: "parameter", Module: "model", Op: "weights"},
		{Address: largeBase + largeParams, Size: largeSegSize - largeParams, State: device.StateInactive}}}
}

// pickleStream writes a protocol 4 pickle piece by piece, memoizing as
// Python's pickler does (every container, each distinct string once), so
// that a history of any length is written with memory for its distinct
// strings and stacks only.
type pickleStream struct {
	w    *bufio.Writer
	n    int64 // bytes written
	memo int   // slots stored
	strs map[string]int
	err  error
}

func newPickleStream(w io.Writer) *pickleStream {
	p := &pickleStream{w: bufio.NewWriterSize(w, 1<<20), strs: map[string]int{}}
	p.raw(0x80, 4) // PROTO 4
	return p
}

func (p *pickleStream) raw(b ...byte) {
	if p.err == nil {
		var k int
		k, p.err = p.w.Write(b)
		p.n += int64(k)
	}
}

func (p *pickleStream) memoize() int { p.raw(0x94); p.memo++; return p.memo - 1 }

func (p *pickleStream) get(i int) {
	if i < 256 {
		p.raw('h', byte(i))
		return
	}
	p.raw('j', byte(i), byte(i>>8), byte(i>>16), byte(i>>24))
}

func (p *pickleStream) str(s string) {
	if i, ok := p.strs[s]; ok {
		p.get(i)
		return
	}
	if len(s) < 256 {
		p.raw(0x8c, byte(len(s))) // SHORT_BINUNICODE
	} else {
		p.raw('X', byte(len(s)), byte(len(s)>>8), byte(len(s)>>16), byte(len(s)>>24))
	}
	p.raw([]byte(s)...)
	p.strs[s] = p.memoize()
}

func (p *pickleStream) int(i int64) {
	switch {
	case i >= 0 && i < 1<<8:
		p.raw('K', byte(i))
	case i >= 0 && i < 1<<16:
		p.raw('M', byte(i), byte(i>>8))
	case i >= math.MinInt32 && i <= math.MaxInt32:
		p.raw('J', byte(i), byte(i>>8), byte(i>>16), byte(i>>24))
	default:
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], uint64(i))
		n := 8
		for n > 1 && ((b[n-1] == 0 && b[n-2]&0x80 == 0) || (b[n-1] == 0xff && b[n-2]&0x80 != 0)) {
			n--
		}
		p.raw(0x8a, byte(n)) // LONG1
		p.raw(b[:n]...)
	}
}

func (p *pickleStream) float(f float64) {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], math.Float64bits(f))
	p.raw('G')
	p.raw(b[:]...)
}

func (p *pickleStream) boolean(b bool) {
	if b {
		p.raw(0x88)
	} else {
		p.raw(0x89)
	}
}

// dict writes a dict of the pairs kv (key, then a func writing the value).
func (p *pickleStream) dict(kv ...any) {
	p.raw('}')
	p.memoize()
	if len(kv) == 0 {
		return
	}
	p.raw('(')
	for i := 0; i < len(kv); i += 2 {
		p.str(kv[i].(string))
		kv[i+1].(func())()
	}
	p.raw('u') // SETITEMS
}

// list writes a list of n items, item(i) writing each, in batches of 1000
// as Python does.
func (p *pickleStream) list(n int, item func(i int)) {
	p.raw(']')
	p.memoize()
	for i := 0; i < n; i += 1000 {
		if n-i == 1 {
			item(i)
			p.raw('a') // APPEND
			break
		}
		p.raw('(')
		for j := i; j < min(n, i+1000); j++ {
			item(j)
		}
		p.raw('e') // APPENDS
	}
}

func (p *pickleStream) stop() error {
	p.raw('.')
	if p.err == nil {
		p.err = p.w.Flush()
	}
	return p.err
}

// writeLargeSnapshot writes the pickle MarshalPickle writes for
// largeSnapshot(steps, perStep), as a stream: the memory it takes does
// not grow with the history. It returns the number of entries the file
// holds (headroom's free written as free_requested and free_completed)
// and of events they read back as.
func writeLargeSnapshot(w io.Writer, steps, perStep int) (written int64, events int, err error) {
	p := newPickleStream(w)
	v := func(f func()) func() { return f }
	i64 := func(i int64) func() { return func() { p.int(i) } }
	s := func(x string) func() { return func() { p.str(x) } }
	empty := func() { p.list(0, nil) }
	frames := map[memviz.Frame]int{} // a stack's list, by its one frame
	frameList := func(fs []memviz.Frame) func() {
		return func() {
			if len(fs) == 0 {
				empty()
				return
			}
			if i, ok := frames[fs[0]]; ok {
				p.get(i)
				return
			}
			p.raw(']')
			at := p.memoize()
			p.dict("filename", s(fs[0].Filename), "line", i64(fs[0].Line), "name", s(fs[0].Name))
			p.raw('a')
			frames[fs[0]] = at
		}
	}
	p.dict(
		"segments", v(func() {
			seg := largeSegment()
			var allocated, requested int64
			for _, b := range seg.Blocks {
				if b.State == device.StateActiveAllocated {
					allocated += b.Size
					requested += b.Requested
				}
			}
			p.list(1, func(int) {
				p.dict("device", i64(0), "address", i64(seg.Address), "total_size", i64(seg.TotalSize),
					"allocated_size", i64(allocated), "active_size", i64(allocated), "requested_size", i64(requested),
					"stream", i64(0), "segment_type", s(seg.Type),
					"segment_pool_id", v(func() { p.int(0); p.int(0); p.raw(0x86) }),
					"is_expandable", v(func() { p.boolean(false) }), "frames", v(empty),
					"blocks", v(func() {
						p.list(len(seg.Blocks), func(i int) {
							b := seg.Blocks[i]
							kv := []any{"address", i64(b.Address), "size", i64(b.Size), "requested_size", i64(b.Requested),
								"state", s(b.State), "frames", v(empty)}
							for _, f := range [][2]string{{"category", b.Category}, {"module", b.Module}, {"op", b.Op}} {
								if f[1] != "" {
									kv = append(kv, f[0], s(f[1]))
								}
							}
							p.dict(kv...)
						})
					}))
			})
		}),
		"device_traces", v(func() {
			p.list(1, func(int) {
				// the history, in batches of 1000 entries as it is made
				p.raw(']')
				p.memoize()
				batch := 0
				entry := func(e memviz.Event, action string) {
					if batch == 0 {
						p.raw('(')
					}
					kv := []any{"action", s(action), "addr", i64(e.Addr), "size", i64(e.Size), "stream", i64(e.Stream),
						"time_us", i64(e.TimeUS), "frames", frameList(e.Frames)}
					if e.BlockSize != 0 {
						kv = append(kv, "block_size", i64(e.BlockSize))
					}
					if e.Pool != "" {
						kv = append(kv, "pool", s(e.Pool))
					}
					c := e.Category
					if c == "" {
						c = "unknown"
					}
					kv = append(kv, "category", s(c))
					if e.Module != "" {
						kv = append(kv, "module", s(e.Module))
					}
					if e.Op != "" {
						kv = append(kv, "op", s(e.Op))
					}
					if e.Step != 0 {
						kv = append(kv, "step", i64(e.Step))
					}
					p.dict(kv...)
					if batch++; batch == 1000 {
						p.raw('e')
						batch = 0
					}
				}
				largeEvents(steps, perStep, func(e memviz.Event) {
					events++
					if e.Action == device.ActionFree {
						entry(e, "free_requested")
						entry(e, "free_completed")
						return
					}
					entry(e, e.Action)
				})
				if batch > 0 {
					p.raw('e')
				}
			})
		}),
		"headroom", v(func() {
			p.dict("version", i64(1), "device", s("cpu"), "capacity", i64(0), "memory_fraction", v(func() { p.float(0) }),
				"limit", i64(0), "history_max_entries", i64(0), "stats", v(func() { p.dict() }),
				"category_bytes", v(func() { p.dict() }), "category_bytes_at_peak", v(func() { p.dict() }))
		}),
	)
	err = p.stop()
	return p.n, events, err
}
