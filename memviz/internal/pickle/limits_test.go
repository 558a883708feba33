package pickle

import (
	"bytes"
	"encoding/binary"
	"errors"
	"runtime"
	"testing"
)

func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// memoHoleFlood is a pickle of puts, each 4095 memo slots past the last:
// 5 bytes of input for 4096 memo slots.
func memoHoleFlood(puts int) []byte {
	b := []byte{0x80, 2, 'N'}
	for k := range puts {
		var idx [4]byte
		binary.LittleEndian.PutUint32(idx[:], uint32((k+1)*4096-1))
		b = append(b, 'r')
		b = append(b, idx[:]...)
	}
	return append(b, '.')
}

// Unmarshal's default limits are proportional to its input: a 40 KB
// pickle cannot make 32 million memo slots (half a gigabyte), as it could
// under the fixed default of 2^27 values.
func TestUnmarshalLimitsAreProportional(t *testing.T) {
	data := memoHoleFlood(8000)
	var err error
	n := allocated(func() { _, err = Unmarshal(data, nil) })
	if !errors.Is(err, ErrLimit) {
		t.Fatalf("err = %v, want ErrLimit", err)
	}
	if n > 16<<20 {
		t.Errorf("a %d-byte pickle allocated %d bytes", len(data), n)
	}
	// Explicit limits still win, in both directions.
	if _, err := Unmarshal(memoHoleFlood(100), nil); !errors.Is(err, ErrLimit) {
		t.Errorf("500 bytes for 409600 slots: %v, want ErrLimit", err)
	}
	if _, err := Unmarshal(memoHoleFlood(100), &Options{MaxElements: 1 << 20}); err != nil {
		t.Errorf("with MaxElements 2^20: %v", err)
	}
	if _, err := Unmarshal(memoHoleFlood(1), &Options{MaxElements: 100}); !errors.Is(err, ErrLimit) {
		t.Errorf("with MaxElements 100: %v, want ErrLimit", err)
	}
	// A pickle whose values are really there is never short of budget:
	// one value per byte.
	flat := []byte{0x80, 2, ']', '('}
	for range 200_000 {
		flat = append(flat, 'N')
	}
	flat = append(flat, 'e', '.')
	v, err := Unmarshal(flat, nil)
	if err != nil {
		t.Fatalf("200000 Nones: %v", err)
	}
	if l, ok := v.([]any); !ok || len(l) != 200_000 {
		t.Fatalf("200000 Nones read as %T", v)
	}
	// A declared length past the end of the input is truncation, within
	// the budget or not.
	if _, err := Unmarshal([]byte("X\x00\x00\x10\x00abc"), nil); !errors.Is(err, ErrTruncated) {
		t.Errorf("1 MiB string in 8 bytes: %v, want ErrTruncated", err)
	}
}

// Values pushed and never consumed stop at Options.MaxStack, instead of
// growing the stack with the input.
func TestMaxStack(t *testing.T) {
	flood := append([]byte{0x80, 4}, make([]byte, 0, 1<<21)...)
	for range DefaultMaxStack + 10 {
		flood = append(flood, '}')
	}
	flood = append(flood, '.')
	var err error
	n := allocated(func() { _, err = Unmarshal(flood, nil) })
	if !errors.Is(err, ErrLimit) {
		t.Fatalf("err = %v, want ErrLimit", err)
	}
	if n > 256<<20 {
		t.Errorf("allocated %d MiB", n>>20)
	}
	if _, err := Unmarshal(flood, &Options{MaxStack: DefaultMaxStack + 100}); err != nil {
		t.Errorf("with a larger MaxStack: %v", err)
	}
	// A tuple of MaxStack values is the largest.
	tuple := []byte{0x80, 4, '('}
	for range 1000 {
		tuple = append(tuple, 'N')
	}
	tuple = append(tuple, 't', '.')
	if _, err := Unmarshal(tuple, &Options{MaxStack: 1001}); err != nil {
		t.Errorf("tuple of 1000 with MaxStack 1001: %v", err)
	}
	if _, err := Unmarshal(tuple, &Options{MaxStack: 999}); !errors.Is(err, ErrLimit) {
		t.Errorf("tuple of 1000 with MaxStack 999: %v, want ErrLimit", err)
	}
}

// intKeyDict is a pickle of one dict with n distinct int keys, each 6
// bytes of input (BININT key, None value), set in batches of 1000.
func intKeyDict(n int) []byte {
	b := []byte{0x80, 2, '}'}
	for i := 0; i < n; i += 1000 {
		b = append(b, '(')
		for k := i; k < min(i+1000, n); k++ {
			b = append(b, 'J')
			b = binary.LittleEndian.AppendUint32(b, uint32(k))
			b = append(b, 'N')
		}
		b = append(b, 'u')
	}
	return append(b, '.')
}

// noneList is a pickle of one list of n Nones, one byte each, appended in
// batches of 1000.
func noneList(n int) []byte {
	b := []byte{0x80, 2, ']'}
	for i := 0; i < n; i += 1000 {
		b = append(b, '(')
		for range min(1000, n-i) {
			b = append(b, 'N')
		}
		b = append(b, 'e')
	}
	return append(b, '.')
}

// Containers are charged for the memory they hold (Options.MaxMemory),
// which neither the value count nor the payload bytes bound: a dict of
// distinct int keys holds over 100 bytes per 6-byte entry, a list of
// Nones 16 to 32 bytes per input byte. Under a budget of 8 bytes per
// input byte, each fails before allocating a small multiple of its input,
// and both decode under the default (64 per byte).
func TestMaxMemory(t *testing.T) {
	for _, c := range []struct {
		name string
		data []byte
	}{
		{"int-keyed dict", intKeyDict(400_000)},
		{"list of Nones", noneList(2_500_000)},
	} {
		t.Run(c.name, func(t *testing.T) {
			limit := 8 * int64(len(c.data))
			var err error
			n := allocated(func() { _, err = Unmarshal(c.data, &Options{MaxMemory: limit}) })
			if !errors.Is(err, ErrLimit) {
				t.Fatalf("%d bytes under MaxMemory %d: err = %v, want ErrLimit", len(c.data), limit, err)
			}
			if n > uint64(2*limit) {
				t.Errorf("%d bytes under MaxMemory %d allocated %d MiB", len(c.data), limit, n>>20)
			}
			if _, err := Unmarshal(c.data, nil); err != nil {
				t.Errorf("under the default limit: %v", err)
			}
		})
	}
	// The decoder's own accounting: what a result holds is charged once,
	// shared values (memo, DUP) not again.
	shared := []byte{0x80, 2, ']', '(', 'T', 0, 4, 0, 0}
	shared = append(shared, bytes.Repeat([]byte{'x'}, 1024)...)
	shared = append(shared, 'q', 0)
	for range 10_000 {
		shared = append(shared, 'h', 0, '2')
	}
	shared = append(shared, 'e', '.')
	d := NewDecoder(bytes.NewReader(shared), &Options{MaxMemory: 1 << 20})
	v, err := d.Decode()
	if err != nil {
		t.Fatalf("a 1 KiB string 20001 times under 1 MiB: %v", err)
	}
	if l, ok := v.([]any); !ok || len(l) != 20_001 {
		t.Fatalf("read as %T", v)
	}
	if spent := d.opts.MaxMemory - d.memory; spent > 20_001*2*slotSize+2048 {
		t.Errorf("charged %d bytes", spent)
	}
}
