package idx

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
)

// gzipMagic starts every gzip stream (RFC 1952). An IDX file always starts
// with 0x00 0x00, so the two can never be confused.
var gzipMagic = [2]byte{0x1f, 0x8b}

// ReadFile reads and decodes the IDX file at path, decompressing it if it is
// gzip-compressed (detected by content, not by name).
func ReadFile(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Decode(f, path)
}

// Decode decodes an IDX file from r; name identifies it in errors. Gzip input
// is detected by its magic number and decompressed. The whole of r is
// consumed: bytes after the data are an error, as they are in no valid file
// and usually mean the header is wrong.
func Decode(r io.Reader, name string) (*File, error) {
	remaining := remainingSize(r)
	br := bufio.NewReader(r)
	d := &decoder{name: name, remaining: remaining}
	if head, _ := br.Peek(2); len(head) == 2 && head[0] == gzipMagic[0] && head[1] == gzipMagic[1] {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, &FormatError{File: name, Offset: 0, Reason: "bad gzip header", Err: err}
		}
		defer zr.Close()
		d.r = zr
		d.gzip = true
		// The compressed size says nothing exact about the decompressed
		// size: the data is read incrementally, within a cap proportional
		// to the compressed size when that is known (a gzip bomb expands
		// a thousand times), else the fixed cap.
		d.remaining = -1
		if remaining >= 0 {
			d.gzipCap = min(MaxDataBytes, max(MaxGzipRatio*remaining, MinGzipData))
		}
	} else {
		d.r = br
	}
	return d.decode()
}

// remainingSize returns how many bytes r has left when that can be known
// cheaply (files, in-memory readers), or -1.
func remainingSize(r io.Reader) int64 {
	switch r := r.(type) {
	case interface{ Len() int }: // bytes.Reader, bytes.Buffer, strings.Reader
		return int64(r.Len())
	case io.Seeker:
		cur, err := r.Seek(0, io.SeekCurrent)
		if err != nil {
			return -1
		}
		end, err := r.Seek(0, io.SeekEnd)
		if err != nil {
			return -1
		}
		if _, err := r.Seek(cur, io.SeekStart); err != nil {
			// The reader is now at its end; reading would silently see
			// nothing, so refuse to guess rather than misreport.
			return -1
		}
		return end - cur
	}
	return -1
}

type decoder struct {
	name      string
	gzipCap   int64 // bound on a gzip file's data, 0 if none but MaxDataBytes
	r         io.Reader
	gzip      bool
	remaining int64 // bytes of IDX data available from offset 0, or -1
	off       int64 // bytes consumed so far
}

func (d *decoder) errf(off int64, err error, format string, args ...any) error {
	return &FormatError{File: d.name, Offset: off, Gzip: d.gzip, Reason: fmt.Sprintf(format, args...), Err: err}
}

// read fills p, turning a short read into a truncation error that says what
// was being read and how much of it was there.
func (d *decoder) read(p []byte, what string) error {
	n, err := io.ReadFull(d.r, p)
	start := d.off
	d.off += int64(n)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return d.errf(start, nil, "truncated %s: need %d bytes, only %d present", what, len(p), n)
	default:
		return d.errf(d.off, err, "reading %s", what)
	}
}

func (d *decoder) decode() (*File, error) {
	var magic [4]byte
	if err := d.read(magic[:], "header (magic number)"); err != nil {
		if fe, ok := err.(*FormatError); ok && fe.Err == nil && d.off == 0 {
			return nil, d.errf(0, nil, "empty file")
		}
		return nil, err
	}
	if magic[0] != 0 || magic[1] != 0 {
		return nil, d.errf(0, nil, "wrong magic: first bytes are 0x%02X 0x%02X, want 0x00 0x00 (not an IDX file?)", magic[0], magic[1])
	}
	t := Type(magic[2])
	if t.Size() == 0 {
		return nil, d.errf(2, nil, "unknown type code 0x%02X (want one of 0x08 0x09 0x0B 0x0C 0x0D 0x0E)", magic[2])
	}
	nd := int(magic[3])
	if nd == 0 {
		return nil, d.errf(3, nil, "zero dimensions")
	}
	if nd > MaxDims {
		return nil, d.errf(3, nil, "%d dimensions, more than the %d accepted", nd, MaxDims)
	}

	raw := make([]byte, 4*nd)
	if err := d.read(raw, fmt.Sprintf("header (%d dimension sizes)", nd)); err != nil {
		return nil, err
	}
	dataOff := d.off

	// Bound the data size before allocating anything for it: by what the
	// input actually holds when known, else by MaxDataBytes. Products are
	// checked step by step so that no multiplication can overflow.
	limit := MaxDataBytes
	if d.gzipCap > 0 {
		limit = d.gzipCap
	}
	if d.remaining >= 0 {
		limit = max(d.remaining-dataOff, 0)
	}
	limit = min(limit, math.MaxInt)
	dims := make([]int, nd)
	var zero bool
	for i := range dims {
		v := binary.BigEndian.Uint32(raw[4*i:])
		if uint64(v) > uint64(math.MaxInt) {
			return nil, d.errf(int64(4+4*i), nil, "dimension %d is %d, too large for this platform", i, v)
		}
		dims[i] = int(v)
		zero = zero || v == 0
	}
	need := int64(t.Size())
	if !zero {
		for i, v := range dims {
			if need > limit/int64(v) {
				return nil, d.sizeErr(dataOff, dims, t, i, limit)
			}
			need *= int64(v)
		}
	} else {
		need = 0
	}

	data, err := d.readData(need)
	if err != nil {
		return nil, err
	}

	// Anything after the data is garbage. Reading to the end also makes
	// the gzip reader verify its checksum and length trailer.
	extra, err := io.Copy(io.Discard, io.LimitReader(d.r, MaxDataBytes))
	if err != nil {
		return nil, d.errf(d.off+extra, err, "after the data")
	}
	if extra > 0 {
		return nil, d.errf(d.off, nil, "trailing garbage: %d extra bytes after the %d bytes of data that dims %v of %v declare", extra, need, dims, t)
	}
	return &File{Name: d.name, Type: t, Dims: dims, Data: data}, nil
}

// sizeErr explains a declared size that exceeds the limit. When the input
// size is known this is a truncated file (or a corrupt header, which looks the
// same); otherwise the header asks for more than any real file holds.
func (d *decoder) sizeErr(dataOff int64, dims []int, t Type, i int, limit int64) error {
	// The exact product may not fit in an int64; a float64 keeps its
	// magnitude, which is all the message needs.
	total := float64(t.Size())
	for _, v := range dims {
		total *= float64(v)
	}
	if d.remaining >= 0 {
		return d.errf(dataOff, nil, "truncated data: dims %v of %v need %.0f bytes, only %d present", dims, t, total, limit)
	}
	if d.gzipCap > 0 && limit < MaxDataBytes {
		return d.errf(int64(4+4*i), nil, "absurd size: dims %v of %v declare %.0f bytes of data, more than the %d accepted from %d bytes of gzip (%d times; real files expand a few times)", dims, t, total, limit, d.gzipCap/MaxGzipRatio, MaxGzipRatio)
	}
	return d.errf(int64(4+4*i), nil, "absurd size: dims %v of %v declare %.0f bytes of data, more than the %d accepted", dims, t, total, MaxDataBytes)
}

// readData reads the n data bytes. When the input size was not known in
// advance it grows the buffer as data actually arrives, so that a header
// that lies about the size costs at most twice the bytes really present.
func (d *decoder) readData(n int64) ([]byte, error) {
	start := d.off
	if d.remaining >= 0 {
		data := make([]byte, n)
		if err := d.read(data, "data"); err != nil {
			return nil, err
		}
		return data, nil
	}
	const chunk = 1 << 20
	data := make([]byte, 0, min(n, chunk))
	for int64(len(data)) < n {
		if len(data) == cap(data) {
			grown := make([]byte, len(data), min(n, 2*int64(cap(data))))
			copy(grown, data)
			data = grown
		}
		m, err := io.ReadFull(d.r, data[len(data):cap(data)])
		data = data[:len(data)+m]
		d.off += int64(m)
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, d.errf(start, nil, "truncated data: need %d bytes, only %d present", n, len(data))
		}
		if err != nil {
			return nil, d.errf(d.off, err, "reading data")
		}
	}
	return data, nil
}
