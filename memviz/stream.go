package memviz

import (
	"hash/maphash"
	"math/big"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/memviz/internal/pickle"
)

// entry reads a history entry as the pickle is decoded: in one pass over
// its keys where every value has the type eventFields wants, otherwise
// (and for anything eventFields would refuse) through eventFields, whose
// error then names the problem.
func (r *reader) entry(d *pickle.Dict) (Event, error) {
	e, ok := r.quickEvent(d)
	if !ok {
		return r.eventFields(d, "")
	}
	fs, err := r.frameField(d, "")
	if err != nil {
		return e, err
	}
	e.Frames = fs
	return e, nil
}

// quickEvent is eventFields for an entry whose fields all have their
// types; ok is false wherever eventFields would say more (or fail).
func (r *reader) quickEvent(d *pickle.Dict) (e Event, ok bool) {
	var has struct{ action, addr, size bool }
	for _, it := range d.Items() {
		k, isStr := it.Key.(string)
		if !isStr {
			continue
		}
		v := it.Value
		if v == nil {
			continue
		}
		var s *string
		var n *int64
		switch k {
		case "action":
			s, has.action = &e.Action, true
		case "pool":
			s = &e.Pool
		case "category":
			s = &e.Category
		case "module":
			s = &e.Module
		case "op":
			s = &e.Op
		case "addr":
			n, has.addr = &e.Addr, true
		case "size":
			n, has.size = &e.Size, true
		case "device_free":
			n = &e.DeviceFree
		case "time_us":
			n = &e.TimeUS
		case "block_size":
			n = &e.BlockSize
		case "step":
			n = &e.Step
		case "stream":
			switch x := v.(type) {
			case int64:
				e.Stream = x
			case *big.Int:
				if x.Sign() <= 0 || x.BitLen() > 64 {
					return e, false
				}
				e.Stream = int64(x.Uint64())
			default:
				return e, false
			}
			continue
		default:
			continue
		}
		if s != nil {
			if *s, ok = v.(string); !ok {
				return e, false
			}
		} else if *n, ok = v.(int64); !ok {
			return e, false
		}
	}
	if !has.action || e.Size < 0 || e.BlockSize < 0 || e.Addr < 0 ||
		e.Size > maxInt64-e.Addr || e.BlockSize > maxInt64-e.Addr {
		return e, false
	}
	switch e.Action {
	case device.ActionAlloc, device.ActionFree, actionFreeRequested, actionFreeCompleted,
		device.ActionSegmentAlloc, device.ActionSegmentFree, actionSegmentMap, actionSegmentUnmap:
		if !has.addr || !has.size {
			return e, false
		}
	case device.ActionOOM:
		if !has.size {
			return e, false
		}
	}
	return e, true
}

const maxInt64 = 1<<63 - 1

// seed hashes stacks for sharing by content.
var seed = maphash.MakeSeed()

// shareFrames returns a stack equal to fs that an earlier entry has, or
// fs, remembered for later ones. Equal stacks read from separate lists
// (PyTorch's entries each have their own) are then held once.
func (r *reader) shareFrames(fs []Frame) []Frame {
	if len(fs) == 0 {
		return fs
	}
	var h maphash.Hash
	h.SetSeed(seed)
	for i := range fs {
		h.WriteString(fs[i].Filename)
		h.WriteByte(0)
		h.WriteString(fs[i].Name)
		h.WriteByte(0)
		maphash.WriteComparable(&h, fs[i].Line)
	}
	k := h.Sum64()
	if old, ok := r.stacks[k]; ok {
		if equalFrames(old, fs) {
			return old
		}
		return fs // a collision: kept apart
	}
	if r.stacks == nil {
		r.stacks = map[uint64][]Frame{}
	}
	r.stacks[k] = fs
	return fs
}

func equalFrames(a, b []Frame) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// synthFrames is headroomFrames, one slice for each (category, module, op).
func (r *reader) synthFrames(category, module, op string) []Frame {
	k := [3]string{category, module, op}
	if fs, ok := r.synth[k]; ok {
		return fs
	}
	fs := headroomFrames(category, module, op)
	if r.synth == nil {
		r.synth = map[[3]string][]Frame{}
	}
	r.synth[k] = fs
	return fs
}
