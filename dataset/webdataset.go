package dataset

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
)

// Shards is a streaming source over tar archives in the WebDataset layout:
// each sample is the consecutive members sharing a key (the member's path up
// to the first dot of its base name), e.g. 000001.png and 000001.cls. The
// shards are read in the order given, one member at a time, so memory does
// not grow with the data.
//
// Decode takes the image from the png, jpg or jpeg field (CHW float32 in
// [0,1], Channels channels) and the class from the cls field (a decimal
// integer, as text).
type Shards struct {
	Paths    []string
	Channels int // 1 or 3; 0 means 3
	// MaxRecordBytes bounds one record (all its members); a larger one is a
	// SampleError. Zero means DefaultMaxRecordBytes. It is what makes the
	// loader's shuffle buffer a bounded number of bytes.
	MaxRecordBytes int
	// SkipBad makes a shard cut in the middle end that shard (counted in
	// the loader's skipped samples) instead of the stream.
	SkipBad bool
	// OnSkip, if set, is told each shard ended early under SkipBad, with
	// the error naming the shard and the member.
	OnSkip func(error)
	// Bound is the largest sample, for the loader's plan of its workers'
	// scratch (Bounder): set Bound.Shape to Scan's Largest. Zero: the
	// loader plans for the first sample it reads.
	Bound SampleBound
	// ShuffleShards reads the shards in a new order each epoch, a
	// permutation seeded by Seed and the epoch (the loader's shuffle
	// buffer then mixes samples within that order).
	ShuffleShards bool
	Seed          uint64
}

// DefaultMaxRecordBytes is Shards.MaxRecordBytes when unset.
const DefaultMaxRecordBytes = 16 << 20

func (s *Shards) maxRecord() int {
	if s.MaxRecordBytes > 0 {
		return s.MaxRecordBytes
	}
	return DefaultMaxRecordBytes
}

func (s *Shards) channels() int {
	if s.Channels == 0 {
		return 3
	}
	return s.Channels
}

// Open starts a pass over the shards: in the order given, or permuted for
// the epoch with ShuffleShards.
func (s *Shards) Open(ctx context.Context, epoch int) (Stream, error) {
	if len(s.Paths) == 0 {
		return nil, errors.New("dataset: no shards")
	}
	paths := s.Paths
	if s.ShuffleShards {
		st := s.Seed ^ uint64(epoch)*0xD1B54A32D192ED03
		perm := Permutation(len(paths), splitmix64(&st))
		paths = make([]string, len(perm))
		for i, j := range perm {
			paths[i] = s.Paths[j]
		}
	}
	return &tarStream{src: s, paths: paths, open: openCtx}, nil
}

// SampleBound is s.Bound (Bounder).
func (s *Shards) SampleBound() (SampleBound, error) { return s.Bound, nil }

// Decode decodes a record's image and class.
func (s *Shards) Decode(r *Record, ex *Example) error {
	var img []byte
	var imgExt string
	for _, e := range []string{"png", "jpg", "jpeg"} {
		if d, ok := r.Field(e); ok {
			img, imgExt = d, e
			break
		}
	}
	member := func(ext string) *SampleError {
		return &SampleError{File: r.Source, Member: r.Key + "." + ext, Offset: -1, Index: -1}
	}
	if img == nil {
		e := member("png")
		e.Member = r.Key
		e.Err = fmt.Errorf("%w: no png, jpg or jpeg member", ErrLabel)
		return e
	}
	cls, ok := r.Field("cls")
	if !ok {
		e := member("cls")
		e.Err = fmt.Errorf("%w: no cls member", ErrLabel)
		return e
	}
	lab, err := strconv.ParseInt(strings.TrimSpace(string(cls)), 10, 64)
	if err != nil || lab < 0 {
		e := member("cls")
		e.Err = fmt.Errorf("%w: %q is not a class number", ErrLabel, cls)
		return e
	}
	x, h, w, err := DecodeImage(img, r.Source, s.channels(), ex.X)
	if err != nil {
		var se *SampleError
		if errors.As(err, &se) {
			se.Member = r.Key + "." + imgExt
		}
		return err
	}
	ex.X = x
	ex.setShape(s.channels(), h, w)
	ex.Y = append(ex.Y[:0], lab)
	ex.Tokens = ex.Tokens[:0]
	return nil
}

// tarStream walks the shards member by member.
type tarStream struct {
	src   *Shards
	paths []string // the shards in this pass's order
	open  func(context.Context, string) (io.ReadCloser, error)
	shard int // index of the shard being read
	f     io.ReadCloser
	tr    *tar.Reader
	cr    *countReader // what tr has consumed, to see the end marker
	last  string       // the last member read, for errors
	// pending is a header read but not yet consumed: the first member of
	// the next record.
	pending *tar.Header
	mu      sync.Mutex
	closed  bool
	// skipped counts shards ended early under SkipBad.
	skipped int
}

// splitKey splits a member name into WebDataset key and extension: the
// extension starts at the first dot of the base name.
func splitKey(name string) (key, ext string) {
	dir, base := path.Split(name)
	i := strings.IndexByte(base, '.')
	if i < 0 {
		return name, ""
	}
	return dir + base[:i], strings.ToLower(base[i+1:])
}

func (t *tarStream) Next(ctx context.Context, r *Record) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if t.tr == nil {
			if t.shard >= len(t.paths) {
				return io.EOF
			}
			if err := t.openShard(ctx); err != nil {
				return err
			}
		}
		err := t.readRecord(ctx, r)
		if err == nil {
			return nil
		}
		name := t.paths[t.shard]
		t.closeShard()
		t.shard++
		if err == io.EOF {
			if r.n > 0 {
				return nil // the shard's last record
			}
			continue
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var se *SampleError
		if t.src.SkipBad && errors.As(err, &se) && se.File == name {
			t.skipped++
			if t.src.OnSkip != nil {
				t.src.OnSkip(err)
			}
			continue
		}
		return err
	}
}

func (t *tarStream) openShard(ctx context.Context) error {
	// Not under mu: an open can block (a FIFO without its writer), and
	// Close must still get through.
	f, err := t.open(ctx, t.paths[t.shard])
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("dataset: %w", err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		f.Close()
		return errors.New("dataset: stream closed")
	}
	t.cr = &countReader{r: bufio.NewReaderSize(f, 64<<10)}
	t.f, t.tr, t.pending, t.last = f, tar.NewReader(t.cr), nil, ""
	return nil
}

func (t *tarStream) closeShard() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.f != nil {
		t.f.Close()
	}
	t.f, t.tr, t.pending = nil, nil, nil
}

// readRecord reads the members of the next key into r. It returns io.EOF at
// the end of the shard, with r.n > 0 when a last record was read.
func (t *tarStream) readRecord(ctx context.Context, r *Record) error {
	name := t.paths[t.shard]
	r.Reset(name, "")
	total := 0
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		h := t.pending
		t.pending = nil
		if h == nil {
			var err error
			before := t.cr.n
			h, err = t.tr.Next()
			if err == io.EOF {
				// Go's reader also says EOF for a shard cut exactly
				// between members; only the two zero blocks of the
				// end-of-archive marker tell a complete shard.
				if t.cr.n-before < 2*512 {
					return &SampleError{File: name, Member: t.last, Offset: t.cr.n, Index: -1,
						Err: fmt.Errorf("%w: shard ends without the end-of-archive marker", ErrTruncated)}
				}
				return io.EOF
			}
			if err != nil {
				se := &SampleError{File: name, Member: t.last, Offset: -1, Index: -1, Err: err}
				if errors.Is(err, io.ErrUnexpectedEOF) {
					se.Err = fmt.Errorf("%w: shard ends inside the header after member %q", ErrTruncated, t.last)
				}
				return se
			}
		}
		if h.Typeflag != tar.TypeReg {
			if h.Size > 0 {
				// Skipping it would mean reading it: a sparse member's
				// logical size may be terabytes of holes.
				return &SampleError{File: name, Member: h.Name, Offset: -1, Index: -1,
					Err: fmt.Errorf("member of type %q with %d bytes; a WebDataset shard holds regular files", h.Typeflag, h.Size)}
			}
			continue
		}
		key, ext := splitKey(h.Name)
		if r.n > 0 && key != r.Key {
			t.pending = h
			return nil
		}
		r.Key = key
		t.last = h.Name
		total += int(h.Size)
		if h.Size < 0 || total > t.src.maxRecord() {
			return &SampleError{File: name, Member: h.Name, Offset: -1, Index: -1,
				Err: fmt.Errorf("%w: %d bytes > %d", ErrTooLarge, total, t.src.maxRecord())}
		}
		buf := r.AddPart(ext, int(h.Size))
		if _, err := io.ReadFull(t.tr, buf); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) || err == io.EOF {
				err = fmt.Errorf("%w: shard ends inside the member (%d bytes declared)", ErrTruncated, h.Size)
			}
			return &SampleError{File: name, Member: h.Name, Offset: -1, Index: -1, Err: err}
		}
	}
}

// openCtx opens a file for reading, returning when ctx is done even if the
// open blocks: opening a FIFO waits for its writer, and the process must
// stay responsive meanwhile. The abandoned open finishes (and its file is
// closed) in the background if the writer ever comes.
func openCtx(ctx context.Context, path string) (io.ReadCloser, error) {
	type result struct {
		f   *os.File
		err error
	}
	ch := make(chan result, 1)
	go func() {
		f, err := os.Open(path)
		ch <- result{f, err}
	}()
	select {
	case r := <-ch:
		return r.f, r.err
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.f != nil {
				r.f.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

// countReader counts the bytes read through it.
type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// Close closes the open shard; a read blocked on it returns.
func (t *tarStream) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	if t.f != nil {
		t.f.Close()
		t.f = nil
	}
	return nil
}

// Skipped counts shards ended early under SkipBad.
func (t *tarStream) Skipped() int { return t.skipped }

// WriteShard writes samples as one WebDataset tar: for each key, its fields
// in the order given, named key.ext. For tests and for preparing data.
func WriteShard(w io.Writer, keys []string, fields [][]Part) error {
	tw := tar.NewWriter(w)
	for i, k := range keys {
		for _, p := range fields[i] {
			if err := tw.WriteHeader(&tar.Header{Name: k + "." + p.Ext, Mode: 0o644, Size: int64(len(p.Data)), Typeflag: tar.TypeReg}); err != nil {
				return err
			}
			if _, err := io.Copy(tw, bytes.NewReader(p.Data)); err != nil {
				return err
			}
		}
	}
	return tw.Close()
}
