package idx

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
)

// header builds an IDX header for type code t and the given dims.
func header(t byte, dims ...uint32) []byte {
	b := []byte{0, 0, t, byte(len(dims))}
	for _, d := range dims {
		b = binary.BigEndian.AppendUint32(b, d)
	}
	return b
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func gz(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// storedGzip compresses b with deflate's stored (uncompressed) blocks, whose
// layout is fixed by RFC 1951: a 10-byte gzip header, a 5-byte block header,
// then b verbatim. Cutting it at a chosen byte is thus independent of the
// compressor's choices.
func storedGzip(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.NoCompression)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes()[15:15+len(b)], b) {
		t.Fatal("stored gzip layout is not as assumed")
	}
	return buf.Bytes()
}

// streamOnly hides a reader's Len and Seek methods, so that Decode cannot
// know the input size and must use its capped, incremental path.
type streamOnly struct{ r io.Reader }

func (s streamOnly) Read(p []byte) (int, error) { return s.r.Read(p) }

func TestDecodeValid(t *testing.T) {
	f32 := func(v float32) []byte { return binary.BigEndian.AppendUint32(nil, math.Float32bits(v)) }
	f64 := func(v float64) []byte { return binary.BigEndian.AppendUint64(nil, math.Float64bits(v)) }
	tests := []struct {
		name string
		in   []byte
		typ  Type
		dims []int
		want []float64
	}{
		{"ubyte", cat(header(0x08, 2, 2), []byte{0, 1, 128, 255}), Uint8, []int{2, 2}, []float64{0, 1, 128, 255}},
		{"byte", cat(header(0x09, 3), []byte{0x80, 0xff, 0x7f}), Int8, []int{3}, []float64{-128, -1, 127}},
		{"short", cat(header(0x0B, 2), []byte{0x80, 0x00, 0x01, 0x02}), Int16, []int{2}, []float64{-32768, 258}},
		{"int", cat(header(0x0C, 1, 2), []byte{0xff, 0xff, 0xff, 0xfe, 0, 1, 0, 0}), Int32, []int{1, 2}, []float64{-2, 65536}},
		{"float", cat(header(0x0D, 2), f32(1.5), f32(-0.25)), Float32, []int{2}, []float64{1.5, -0.25}},
		{"double", cat(header(0x0E, 1), f64(math.Pi)), Float64, []int{1}, []float64{math.Pi}},
		{"zero-size dim", header(0x08, 0, 28, 28), Uint8, []int{0, 28, 28}, []float64{}},
	}
	for _, tt := range tests {
		for _, variant := range []struct {
			name string
			r    func() io.Reader
		}{
			{"raw", func() io.Reader { return bytes.NewReader(tt.in) }},
			{"raw-stream", func() io.Reader { return streamOnly{bytes.NewReader(tt.in)} }},
			{"gzip", func() io.Reader { return bytes.NewReader(gz(t, tt.in)) }},
		} {
			t.Run(tt.name+"/"+variant.name, func(t *testing.T) {
				f, err := Decode(variant.r(), "x.idx")
				if err != nil {
					t.Fatal(err)
				}
				if f.Type != tt.typ || !slices.Equal(f.Dims, tt.dims) || f.Name != "x.idx" {
					t.Fatalf("got type %v dims %v name %q, want %v %v", f.Type, f.Dims, f.Name, tt.typ, tt.dims)
				}
				if got := f.Float64s(); !slices.Equal(got, tt.want) {
					t.Errorf("Float64s = %v, want %v", got, tt.want)
				}
				if len(f.Data) != f.NumElements()*f.Type.Size() {
					t.Errorf("len(Data) = %d, want %d", len(f.Data), f.NumElements()*f.Type.Size())
				}
				// Writing back reproduces the uncompressed input exactly.
				var buf bytes.Buffer
				if err := Write(&buf, f); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(buf.Bytes(), tt.in) {
					t.Errorf("Write = % x, want % x", buf.Bytes(), tt.in)
				}
			})
		}
	}
}

func TestConversions(t *testing.T) {
	f := &File{Type: Int16, Dims: []int{2}, Data: []byte{0xff, 0xfe, 0x01, 0x00}}
	ints, err := f.Int64s()
	if err != nil || !slices.Equal(ints, []int64{-2, 256}) {
		t.Errorf("Int64s = %v, %v", ints, err)
	}
	if got := f.Float32s(); !slices.Equal(got, []float32{-2, 256}) {
		t.Errorf("Float32s = %v", got)
	}
	nan := &File{Name: "n", Type: Float32, Dims: []int{1}, Data: []byte{0x7f, 0xc0, 0x00, 0x01}}
	if got := math.Float32bits(nan.Float32s()[0]); got != 0x7fc00001 {
		t.Errorf("float32 bits = %#x, want NaN payload kept", got)
	}
	if _, err := nan.Int64s(); err == nil {
		t.Error("Int64s of float data: want error")
	}
}

func TestDecodeMalformed(t *testing.T) {
	valid := cat(header(0x08, 2, 3), []byte{1, 2, 3, 4, 5, 6})
	corruptCRC := gz(t, valid)
	corruptCRC[len(corruptCRC)-8] ^= 0xff // CRC-32 is the trailer's first word

	tests := []struct {
		name   string
		in     []byte
		stream bool // hide the input size from Decode
		offset int64
		gzip   bool
		reason []string // substrings the reason must contain
	}{
		{name: "empty", in: nil, offset: 0, reason: []string{"empty file"}},
		{name: "short magic", in: []byte{0, 0}, offset: 0, reason: []string{"truncated header", "need 4 bytes, only 2 present"}},
		{name: "wrong magic", in: cat([]byte{0x12, 0x34, 0x08, 1}, valid[4:]), offset: 0, reason: []string{"wrong magic", "0x12 0x34"}},
		{name: "unknown type", in: cat(header(0x0A, 6), valid[12:]), offset: 2, reason: []string{"unknown type code 0x0A"}},
		{name: "zero dims", in: header(0x08), offset: 3, reason: []string{"zero dimensions"}},
		{name: "too many dims", in: cat([]byte{0, 0, 8, 17}, make([]byte, 68)), offset: 3, reason: []string{"17 dimensions", "16"}},
		{name: "truncated dims", in: []byte{0, 0, 8, 3, 0, 0, 0, 2, 0, 0}, offset: 4, reason: []string{"truncated header (3 dimension sizes)", "need 12 bytes, only 6 present"}},
		{name: "truncated data", in: valid[:len(valid)-2], offset: 12, reason: []string{"truncated data", "need 6 bytes, only 4 present"}},
		{name: "truncated data stream", in: valid[:len(valid)-2], stream: true, offset: 12, reason: []string{"truncated data", "need 6 bytes, only 4 present"}},
		{name: "truncated data gzip", in: gz(t, valid[:len(valid)-2]), offset: 12, gzip: true, reason: []string{"truncated data", "need 6 bytes, only 4 present"}},
		{name: "truncated gzip stream", in: storedGzip(t, valid)[:10+5+14], offset: 12, gzip: true, reason: []string{"truncated data", "need 6 bytes, only 2 present"}},
		{name: "trailing garbage", in: cat(valid, []byte{9, 9, 9}), offset: 18, reason: []string{"trailing garbage", "3 extra bytes"}},
		{name: "trailing garbage stream", in: cat(valid, []byte{9}), stream: true, offset: 18, reason: []string{"trailing garbage", "1 extra bytes"}},
		{name: "trailing garbage gzip", in: gz(t, cat(valid, []byte{9, 9})), offset: 18, gzip: true, reason: []string{"trailing garbage", "2 extra bytes"}},
		{name: "bad gzip header", in: []byte{0x1f, 0x8b, 0, 0, 0}, offset: 0, reason: []string{"bad gzip header"}},
		{name: "gzip checksum", in: corruptCRC, offset: 18, gzip: true, reason: []string{"after the data"}},
		{name: "absurd size known", in: cat(header(0x0E, 1<<31, 1<<31), []byte{1, 2, 3}), offset: 12, reason: []string{"truncated data", "only 3 present"}},
		{name: "absurd size stream", in: cat(header(0x0E, 1<<31, 1<<31), []byte{1, 2, 3}), stream: true, offset: 4, reason: []string{"absurd size", "more than the 4294967296 accepted"}},
		{name: "absurd size gzip", in: gz(t, cat(header(0x0C, 0xffffffff, 0xffffffff, 0xffffffff), []byte{1})), offset: 4, gzip: true, reason: []string{"absurd size"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r io.Reader = bytes.NewReader(tt.in)
			if tt.stream {
				r = streamOnly{r}
			}
			f, err := Decode(r, "bad-images.idx")
			if err == nil {
				t.Fatalf("Decode succeeded (dims %v), want error", f.Dims)
			}
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("error %T %v, want *FormatError", err, err)
			}
			if fe.File != "bad-images.idx" || !strings.Contains(err.Error(), "bad-images.idx") {
				t.Errorf("error %q does not name the file", err)
			}
			if fe.Offset != tt.offset {
				t.Errorf("offset = %d, want %d (%v)", fe.Offset, tt.offset, err)
			}
			if fe.Gzip != tt.gzip {
				t.Errorf("Gzip = %v, want %v", fe.Gzip, tt.gzip)
			}
			for _, want := range tt.reason {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
		})
	}
}

func TestGzipChecksumUnwraps(t *testing.T) {
	b := gz(t, cat(header(0x08, 1), []byte{7}))
	b[len(b)-8] ^= 1
	_, err := Decode(bytes.NewReader(b), "x")
	if !errors.Is(err, gzip.ErrChecksum) {
		t.Errorf("err = %v, want to wrap gzip.ErrChecksum", err)
	}
}

// A header that lies about the size must not cost the declared size in
// memory, whether or not the input size is known.
func TestLyingHeaderDoesNotAllocate(t *testing.T) {
	in := cat(header(0x08, 1<<31, 1), []byte{1, 2, 3}) // claims 2 GiB, under the cap
	for _, r := range []func() io.Reader{
		func() io.Reader { return bytes.NewReader(in) },
		func() io.Reader { return streamOnly{bytes.NewReader(in)} },
		func() io.Reader { return bytes.NewReader(gz(t, in)) },
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		if _, err := Decode(r(), "liar"); err == nil {
			t.Fatal("want error")
		}
		runtime.ReadMemStats(&after)
		if got := after.TotalAlloc - before.TotalAlloc; got > 16<<20 {
			t.Errorf("allocated %d bytes for a 3-byte body", got)
		}
	}
}

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	valid := cat(header(0x08, 3), []byte{1, 2, 3})
	for name, content := range map[string][]byte{
		"plain":         valid,
		"plain.gz":      gz(t, valid),
		"gz-no-suffix":  gz(t, valid), // detected by content, not by name
		"truncated.gz":  gz(t, valid[:len(valid)-1]),
		"truncated-raw": valid[:len(valid)-1],
	} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, content, 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := ReadFile(path)
		if strings.HasPrefix(name, "truncated") {
			var fe *FormatError
			if !errors.As(err, &fe) || fe.File != path || !strings.Contains(err.Error(), path) {
				t.Errorf("%s: err = %v, want FormatError naming %s", name, err, path)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(f.Data, []byte{1, 2, 3}) || f.Name != path {
			t.Errorf("%s: got %v name %q", name, f.Data, f.Name)
		}
	}
	if _, err := ReadFile(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: err = %v, want ErrNotExist", err)
	}
}

// Decode must leave a seekable reader's position meaningful: it reads from
// the current offset, not from the start.
func TestDecodeFromOffset(t *testing.T) {
	valid := cat(header(0x08, 2), []byte{5, 6})
	r := bytes.NewReader(cat([]byte("junk"), valid))
	if _, err := r.Seek(4, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	f, err := Decode(r, "x")
	if err != nil || !bytes.Equal(f.Data, []byte{5, 6}) {
		t.Fatalf("Decode = %v, %v", f, err)
	}
}

func TestWriteErrors(t *testing.T) {
	tests := []struct {
		name string
		f    File
		want string
	}{
		{"unknown type", File{Type: 0x0A, Dims: []int{1}, Data: []byte{1}}, "unknown type"},
		{"no dims", File{Type: Uint8, Data: nil}, "0 dimensions"},
		{"too many dims", File{Type: Uint8, Dims: make([]int, 17)}, "17 dimensions"},
		{"negative dim", File{Type: Uint8, Dims: []int{-1}}, "not a uint32"},
		{"huge dim", File{Type: Uint8, Dims: []int{1 << 33}}, "not a uint32"},
		{"short data", File{Type: Int16, Dims: []int{2, 2}, Data: make([]byte, 7)}, "need 8 bytes, data has 7"},
		{"overflow", File{Type: Float64, Dims: []int{1 << 31, 1 << 31, 1 << 31}}, "overflow"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.f.Name = "out.idx"
			var buf bytes.Buffer
			err := Write(&buf, &tt.f)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "out.idx") {
				t.Errorf("err = %v, want one naming out.idx and containing %q", err, tt.want)
			}
			if buf.Len() != 0 {
				t.Errorf("wrote %d bytes before failing", buf.Len())
			}
		})
	}
}

func TestTypeString(t *testing.T) {
	for typ, want := range map[Type]string{Uint8: "ubyte", Int8: "byte", Int16: "short", Int32: "int", Float32: "float", Float64: "double", 0x0A: "type(0x0A)"} {
		if got := typ.String(); got != want {
			t.Errorf("%#x.String() = %q, want %q", byte(typ), got, want)
		}
	}
}

// Data larger than the first read buffer grows it step by step when the size
// is not known in advance; the result must be the same.
func TestDecodeLargeStream(t *testing.T) {
	data := make([]byte, 3<<20+5)
	for i := range data {
		data[i] = byte(i * 31)
	}
	in := cat(header(0x08, uint32(len(data))), data)
	for name, r := range map[string]io.Reader{
		"stream": streamOnly{bytes.NewReader(in)},
		"gzip":   bytes.NewReader(gz(t, in)),
	} {
		f, err := Decode(r, name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(f.Data, data) {
			t.Errorf("%s: data differs", name)
		}
	}
}

// An I/O failure is reported as such (wrapped, with the file and offset),
// not as a truncation.
func TestDecodeIOError(t *testing.T) {
	boom := errors.New("disk on fire")
	valid := cat(header(0x08, 4), []byte{1, 2, 3, 4})
	for _, cut := range []int{2, 6, 10} { // in the magic, the dims, the data
		for _, stream := range []bool{false, true} {
			var r io.Reader = io.MultiReader(bytes.NewReader(valid[:cut]), iotest.ErrReader(boom))
			if !stream {
				r = &lenReader{r, len(valid)}
			}
			_, err := Decode(r, "flaky")
			var fe *FormatError
			if !errors.Is(err, boom) || !errors.As(err, &fe) || fe.File != "flaky" || fe.Offset != int64(cut) || strings.Contains(err.Error(), "truncated") {
				t.Errorf("cut %d stream %v: err = %v, want wrapped I/O error at offset %d", cut, stream, err, cut)
			}
		}
	}
}

// lenReader claims a size, as a file would, to take Decode's known-size path.
type lenReader struct {
	io.Reader
	n int
}

func (l *lenReader) Len() int { return l.n }
