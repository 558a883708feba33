package pickle

import (
	"bufio"
	"encoding/binary"
	"io"
	"math/bits"
	"strconv"
	"strings"
)

// MemoRefs says which memo slots of one pickle are read back (GET,
// BINGET, LONG_BINGET). Python's pickler memoizes every container and
// string it writes, so a decoder that keeps every memo slot keeps every
// dict of a long list alive until the end; given MemoRefs
// (Options.Refs), a Decoder keeps only the slots that are read back, and
// stores them densely. ScanMemo makes one from the pickle's bytes.
type MemoRefs struct {
	bits  []uint64 // bit i: slot i is read back
	rank  []uint32 // set bits before each word: slot i's dense index
	slots int      // slots stored in all (PUT, BINPUT, LONG_BINPUT, MEMOIZE)
}

// Has reports whether slot i is read back.
func (m *MemoRefs) Has(i uint64) bool {
	w := i / 64
	return w < uint64(len(m.bits)) && m.bits[w]&(1<<(i%64)) != 0
}

// Len returns the number of slots read back.
func (m *MemoRefs) Len() int {
	if n := len(m.rank); n > 0 {
		return int(m.rank[n-1]) + bits.OnesCount64(m.bits[n-1])
	}
	return 0
}

// Slots returns the number of slots the pickle stores.
func (m *MemoRefs) Slots() int { return m.slots }

// index is the dense index of a slot that Has.
func (m *MemoRefs) index(i uint64) uint64 {
	w := i / 64
	return uint64(m.rank[w]) + uint64(bits.OnesCount64(m.bits[w]&(1<<(i%64)-1)))
}

func setBit(b []uint64, i uint64) []uint64 {
	w := int(i / 64)
	for len(b) <= w {
		b = append(b, 0)
	}
	b[w] |= 1 << (i % 64)
	return b
}

// ScanMemo reads one pickle's opcodes from r, up to its STOP, without
// building any value, and returns which memo slots it reads back. It
// returns false when the pickle's memo is not one that can be kept in
// part: a slot stored twice, a slot index far beyond the slots stored so
// far, or anything the scan cannot follow (an unknown opcode, a
// truncated argument, a bad index). Such a pickle is decoded without
// Refs, which reports whatever is wrong with it at its offset. The scan
// reads each byte once and holds two bits per memo slot.
func ScanMemo(r io.Reader) (*MemoRefs, bool) {
	br, ok := r.(*bufio.Reader)
	if !ok {
		br = bufio.NewReaderSize(r, 64<<10)
	}
	var filled, read []uint64
	var stored uint64
	var buf [8]byte
	line := func() (string, bool) {
		var s []byte
		for {
			chunk, err := br.ReadSlice('\n')
			s = append(s, chunk...)
			if err == bufio.ErrBufferFull {
				continue
			}
			if err != nil {
				return "", false
			}
			return string(s[:len(s)-1]), true
		}
	}
	index := func(op byte) (uint64, bool) {
		switch opTable[op].arg {
		case argU1:
			b, err := br.ReadByte()
			return uint64(b), err == nil
		case argU4:
			if _, err := io.ReadFull(br, buf[:4]); err != nil {
				return 0, false
			}
			return uint64(binary.LittleEndian.Uint32(buf[:4])), true
		}
		s, ok := line()
		if !ok {
			return 0, false
		}
		i, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
		return i, err == nil
	}
	put := func(i uint64) bool {
		// as the Decoder's dense memo: a slot far past those stored
		// would make the bitsets large for nothing
		if i >= stored+4096 || (i/64 < uint64(len(filled)) && filled[i/64]&(1<<(i%64)) != 0) {
			return false
		}
		filled = setBit(filled, i)
		stored++
		return true
	}
	for {
		op, err := br.ReadByte()
		if err != nil {
			return nil, false
		}
		switch op {
		case opSTOP:
			m := &MemoRefs{bits: read, rank: make([]uint32, len(read)), slots: int(stored)}
			var n uint32
			for w, b := range read {
				m.rank[w] = n
				n += uint32(bits.OnesCount64(b))
			}
			return m, true
		case opGET, opBINGET, opLONG_BINGET:
			i, ok := index(op)
			// a slot never stored (or stored later) is the decoder's error
			// to report; marking it here costs at most the bitset's size
			if !ok || i >= stored+4096 {
				return nil, false
			}
			read = setBit(read, i)
			continue
		case opPUT, opBINPUT, opLONG_BINPUT:
			i, ok := index(op)
			if !ok || !put(i) {
				return nil, false
			}
			continue
		case opMEMOIZE:
			if !put(stored) {
				return nil, false
			}
			continue
		}
		var n uint64
		switch opTable[op].arg {
		case argNone:
			if opTable[op].name == "" {
				return nil, false
			}
			continue
		case argU1:
			n = 1
		case argU2:
			n = 2
		case argU4:
			n = 4
		case argU8:
			n = 8 // a FRAME's length: its contents are opcodes, read on
		case argLine:
			if _, ok := line(); !ok {
				return nil, false
			}
			continue
		case argLine2:
			if _, ok := line(); !ok {
				return nil, false
			}
			if _, ok := line(); !ok {
				return nil, false
			}
			continue
		case argLen1:
			b, err := br.ReadByte()
			if err != nil {
				return nil, false
			}
			n = uint64(b)
		case argLen4:
			if _, err := io.ReadFull(br, buf[:4]); err != nil {
				return nil, false
			}
			n = uint64(binary.LittleEndian.Uint32(buf[:4]))
		case argLen8:
			if _, err := io.ReadFull(br, buf[:8]); err != nil {
				return nil, false
			}
			n = binary.LittleEndian.Uint64(buf[:8])
		}
		if n > 1<<62 {
			return nil, false
		}
		if k, err := br.Discard(int(n)); err != nil || uint64(k) != n {
			return nil, false
		}
	}
}
