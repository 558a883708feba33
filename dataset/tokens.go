package dataset

import (
	"encoding/binary"
	"fmt"
	"os"
)

// TokenOptions says how to read a token file.
type TokenOptions struct {
	// Width is the bytes per token: 2 (uint16, nanoGPT's train.bin) or 4
	// (uint32). Zero means 2, or what the file's header says.
	Width int
	// Context is the window length T: sample i is x = tokens[s : s+T] and
	// y = tokens[s+1 : s+T+1], for s = i*Stride.
	Context int
	// Stride is the distance between window starts; zero means Context
	// (non-overlapping windows). Stride 1 gives every window, as nanoGPT's
	// random offsets do, at the price of a sampler order of 8 bytes per
	// token (the loader reports it).
	Stride int
}

// TokenFile is a map-style source over a flat array of little-endian
// tokens, memory-mapped read-only (read into memory where mmap is not
// available): nanoGPT's train.bin, or llm.c's .bin with its 1024-byte header
// (magic 20240520), which is recognised and checked.
type TokenFile struct {
	Path    string
	Width   int // bytes per token
	Context int
	Stride  int
	Header  bool // the file has an llm.c header
	tokens  []byte
	whole   []byte
	unmap   func() error
	// file reads windows where the file is mapped: faulting windows in
	// through the mapping would map whole page-cache folios (up to 2 MiB
	// each on Linux) into the process, so that a shuffled pass left the
	// file resident in it; a read copies just the window out of the page
	// cache, which stays shared. off is the tokens' offset in the file.
	file *os.File
	off  int64
}

// The llm.c token file header: 256 little-endian int32, of which the first
// three are magic, version (1: uint16 tokens, 2: uint32) and token count.
const (
	tokenMagic      = 20240520
	tokenHeaderSize = 256 * 4
)

// OpenTokens maps path.
func OpenTokens(path string, opt TokenOptions) (*TokenFile, error) {
	if opt.Context <= 0 {
		return nil, fmt.Errorf("dataset: token file %s: context length %d, must be positive", path, opt.Context)
	}
	if opt.Stride < 0 {
		return nil, fmt.Errorf("dataset: token file %s: stride %d is negative", path, opt.Stride)
	}
	data, unmap, err := mapFile(path)
	if err != nil {
		return nil, err
	}
	tokens, width, header, err := parseTokens(data, path, opt.Width)
	if err != nil {
		unmap()
		return nil, err
	}
	t := &TokenFile{Path: path, Width: width, Context: opt.Context, Stride: opt.Stride, Header: header,
		tokens: tokens, whole: data, unmap: unmap}
	if header {
		t.off = tokenHeaderSize
	}
	if mapped {
		if t.file, err = os.Open(path); err != nil {
			unmap()
			return nil, fmt.Errorf("dataset: %w", err)
		}
	}
	if t.Stride == 0 {
		t.Stride = t.Context
	}
	return t, nil
}

// parseTokens checks a token file's header (if any) and size, returning the
// token bytes and their width. width 0 means "2 unless a header says".
func parseTokens(data []byte, name string, width int) (tokens []byte, w int, header bool, err error) {
	if width != 0 && width != 2 && width != 4 {
		return nil, 0, false, fmt.Errorf("dataset: token file %s: token width %d, want 2 or 4", name, width)
	}
	if len(data) >= 4 && binary.LittleEndian.Uint32(data) == tokenMagic {
		if len(data) < tokenHeaderSize {
			return nil, 0, false, &SampleError{File: name, Offset: int64(len(data)), Index: -1,
				Err: fmt.Errorf("%w: llm.c header needs %d bytes, file has %d", ErrTruncated, tokenHeaderSize, len(data))}
		}
		version := binary.LittleEndian.Uint32(data[4:])
		hw := map[uint32]int{1: 2, 2: 4}[version]
		if hw == 0 {
			return nil, 0, false, &SampleError{File: name, Offset: 4, Index: -1, Err: fmt.Errorf("llm.c header version %d, want 1 (uint16) or 2 (uint32)", version)}
		}
		if width != 0 && width != hw {
			return nil, 0, false, &SampleError{File: name, Offset: 4, Index: -1, Err: fmt.Errorf("llm.c header version %d means %d-byte tokens, %d requested", version, hw, width)}
		}
		count := int64(binary.LittleEndian.Uint32(data[8:]))
		body := int64(len(data) - tokenHeaderSize)
		if count*int64(hw) != body {
			return nil, 0, false, &SampleError{File: name, Offset: 8, Index: -1,
				Err: fmt.Errorf("header declares %d tokens (%d bytes) but %d bytes follow the header", count, count*int64(hw), body)}
		}
		return data[tokenHeaderSize:], hw, true, nil
	}
	if width == 0 {
		width = 2
	}
	if r := len(data) % width; r != 0 {
		off := int64(len(data) - r)
		return nil, 0, false, &SampleError{File: name, Offset: off, Index: -1,
			Err: fmt.Errorf("%w: size %d is not a multiple of the %d-byte token width (%d stray byte(s) at offset %d)", ErrTruncated, len(data), width, r, off)}
	}
	return data, width, false, nil
}

// NumTokens is the number of tokens in the file.
func (t *TokenFile) NumTokens() int { return len(t.tokens) / t.Width }

// Len is the number of windows.
func (t *TokenFile) Len() int {
	n := t.NumTokens()
	if n < t.Context+1 {
		return 0
	}
	return (n-t.Context-1)/t.Stride + 1
}

// Token returns token k.
func (t *TokenFile) Token(k int) int64 {
	if t.Width == 2 {
		return int64(binary.LittleEndian.Uint16(t.tokens[2*k:]))
	}
	return int64(binary.LittleEndian.Uint32(t.tokens[4*k:]))
}

// Get fills ex.Tokens with window i and ex.Y with the same window shifted
// by one token.
func (t *TokenFile) Get(i int, ex *Example) error {
	s, n := i*t.Stride, t.Context
	ex.Tokens = grow(ex.Tokens, n)
	ex.Y = grow(ex.Y, n)
	src := t.tokens[s*t.Width:]
	if t.file != nil {
		size := (n + 1) * t.Width
		if cap(ex.raw) < size {
			ex.raw = make([]byte, size)
		}
		src = ex.raw[:size]
		if _, err := t.file.ReadAt(src, t.off+int64(s*t.Width)); err != nil {
			return &SampleError{File: t.Path, Offset: t.off + int64(s*t.Width), Index: i, Err: err}
		}
	}
	token := func(k int) int64 {
		if t.Width == 2 {
			return int64(binary.LittleEndian.Uint16(src[2*k:]))
		}
		return int64(binary.LittleEndian.Uint32(src[4*k:]))
	}
	prev := token(0)
	for j := range n {
		next := token(j + 1)
		ex.Tokens[j], ex.Y[j] = prev, next
		prev = next
	}
	ex.X = ex.X[:0]
	ex.setShape(n)
	return nil
}

// ResidentBytes is what the source keeps in the process: nothing of the
// data where the file is mapped (windows are read out of the page cache),
// the whole file where it is read into memory.
func (t *TokenFile) ResidentBytes() int64 {
	if mapped {
		return 0
	}
	return int64(len(t.whole))
}

// Close unmaps the file. Close any loader reading it first: its workers
// would fault reading unmapped memory.
func (t *TokenFile) Close() error {
	if t.unmap == nil {
		return nil
	}
	err := t.unmap()
	if t.file != nil {
		if cerr := t.file.Close(); err == nil {
			err = cerr
		}
	}
	t.unmap, t.tokens, t.whole, t.file = nil, nil, nil, nil
	return err
}

// WriteTokens encodes tokens as a flat little-endian array of the given
// width (2 or 4), nanoGPT's format; a token that does not fit is an error.
func WriteTokens(tokens []int64, width int) ([]byte, error) {
	if width != 2 && width != 4 {
		return nil, fmt.Errorf("dataset: token width %d, want 2 or 4", width)
	}
	out := make([]byte, len(tokens)*width)
	for i, v := range tokens {
		if v < 0 || v >= 1<<(8*width) {
			return nil, fmt.Errorf("dataset: token %d at position %d does not fit %d bytes", v, i, width)
		}
		if width == 2 {
			binary.LittleEndian.PutUint16(out[2*i:], uint16(v))
		} else {
			binary.LittleEndian.PutUint32(out[4*i:], uint32(v))
		}
	}
	return out, nil
}
