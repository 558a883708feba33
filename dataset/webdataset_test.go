package dataset

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// shardBytes encodes samples lo..hi-1 as a WebDataset shard: a 4x4 PNG
// whose blue channel is the sample number, and its class.
func shardBytes(t testing.TB, lo, hi int) []byte {
	t.Helper()
	var keys []string
	var fields [][]Part
	for i := lo; i < hi; i++ {
		keys = append(keys, fmt.Sprintf("%06d", i))
		fields = append(fields, []Part{
			{Ext: "png", Data: encodePNG(t, testImage(4, 4, uint8(i)))},
			{Ext: "cls", Data: []byte(fmt.Sprint(i % 10))},
		})
	}
	var b bytes.Buffer
	if err := WriteShard(&b, keys, fields); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// makeShards writes n shards of per samples each.
func makeShards(t testing.TB, n, per int) []string {
	dir := t.TempDir()
	var paths []string
	for s := range n {
		p := filepath.Join(dir, fmt.Sprintf("shard-%03d.tar", s))
		writeFile(t, p, shardBytes(t, s*per, (s+1)*per))
		paths = append(paths, p)
	}
	return paths
}

// readAll reads a stream's keys.
func readAll(t *testing.T, src StreamSource) ([]string, error) {
	t.Helper()
	st, err := src.Open(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var keys []string
	var r Record
	for {
		err := st.Next(t.Context(), &r)
		if err == io.EOF {
			return keys, nil
		}
		if err != nil {
			return keys, err
		}
		var exts []string
		for _, p := range r.Fields() {
			exts = append(exts, p.Ext)
		}
		keys = append(keys, r.Key+":"+strings.Join(exts, ","))
	}
}

func TestShardsStream(t *testing.T) {
	paths := makeShards(t, 3, 4)
	keys, err := readAll(t, &Shards{Paths: paths})
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 12 || keys[0] != "000000:png,cls" || keys[11] != "000011:png,cls" {
		t.Fatalf("keys %v", keys)
	}
	var ex Example
	st, _ := (&Shards{Paths: paths}).Open(t.Context(), 0)
	var r Record
	for range 6 {
		if err := st.Next(t.Context(), &r); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	if err := (&Shards{}).Decode(&r, &ex); err != nil || ex.Y[0] != 5 || !slices.Equal(ex.Shape, []int{3, 4, 4}) || ex.X[2*16] != float32(5)/255 {
		t.Errorf("record 5 decodes to label %v shape %v: %v", ex.Y, ex.Shape, err)
	}
}

func TestSplitKey(t *testing.T) {
	for _, tt := range [][3]string{
		{"000001.png", "000001", "png"},
		{"a/b.c/x.seg.PNG", "a/b.c/x", "seg.png"},
		{"noext", "noext", ""},
	} {
		if k, e := splitKey(tt[0]); k != tt[1] || e != tt[2] {
			t.Errorf("splitKey(%q) = %q, %q", tt[0], k, e)
		}
	}
}

func TestShardsBad(t *testing.T) {
	good := shardBytes(t, 0, 3)
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		writeFile(t, p, data)
		return p
	}
	// Member boundaries: each member is a 512-byte header and its data
	// padded to 512.
	img := encodePNG(t, testImage(4, 4, 0))
	firstEnd := 512 + (len(img)+511)/512*512
	tests := []struct {
		name, member string
		data         []byte
	}{
		{"mid-member", "000000.png", good[:512+10]},
		{"mid-header", "000000.png", good[:firstEnd+100]},
		{"at a member boundary", "000000.png", good[:firstEnd]},
		{"no end marker", "000002.cls", good[:len(good)-1024]},
	}
	for _, tt := range tests {
		p := write(tt.name+".tar", tt.data)
		_, err := readAll(t, &Shards{Paths: []string{p}})
		var se *SampleError
		if !errors.As(err, &se) || se.File != p || se.Member != tt.member || !errors.Is(err, ErrTruncated) {
			t.Errorf("%s: error %v, want a truncation naming %s and %s", tt.name, err, p, tt.member)
		}
	}
	// Under SkipBad a cut shard ends early and the next is read.
	cut := write("cut.tar", good[:len(good)-600])
	whole := write("whole.tar", shardBytes(t, 3, 5))
	keys, err := readAll(t, &Shards{Paths: []string{cut, whole}, SkipBad: true})
	if err != nil || len(keys) != 4 || keys[3] != "000004:png,cls" {
		t.Errorf("skip: keys %v, %v", keys, err)
	}
	// A record over the byte bound.
	_, err = readAll(t, &Shards{Paths: []string{whole}, MaxRecordBytes: 10})
	if !errors.Is(err, ErrTooLarge) {
		t.Errorf("bound: %v", err)
	}
	// Missing fields and bad classes name the member.
	for _, tt := range []struct {
		parts []Part
		want  string
	}{
		{[]Part{{Ext: "cls", Data: []byte("1")}}, "member k: bad label: no png"},
		{[]Part{{Ext: "png", Data: img}}, "member k.cls: bad label: no cls"},
		{[]Part{{Ext: "png", Data: img}, {Ext: "cls", Data: []byte("x")}}, `member k.cls: bad label: "x"`},
		{[]Part{{Ext: "jpg", Data: img[:20]}, {Ext: "cls", Data: []byte("1")}}, "member k.jpg: "},
	} {
		var r Record
		r.Reset("s.tar", "k")
		for _, p := range tt.parts {
			copy(r.AddPart(p.Ext, len(p.Data)), p.Data)
		}
		var ex Example
		err := (&Shards{}).Decode(&r, &ex)
		if err == nil || !strings.Contains(err.Error(), "s.tar: "+tt.want) {
			t.Errorf("decode: %v, want %q", err, tt.want)
		}
	}
}

func drainStream(t *testing.T, l *Loader) []copied {
	return drain(t, l, t.Context())
}

func newStreamLoader(t *testing.T, src StreamSource, cfg Config) *Loader {
	t.Helper()
	l, err := NewStreamLoader(src, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// sampleOf recovers the sample number from a decoded 4x4 test image (blue
// channel) of a batch without transforms.
func sampleOf(b copied, pos int) int {
	return int(b.X[pos*48+2*16]*255 + 0.5)
}

func TestStreamLoader(t *testing.T) {
	paths := makeShards(t, 3, 7) // 21 samples
	src := &Shards{Paths: paths}
	// In order without shuffling; the last batch short or dropped.
	for _, dropLast := range []bool{false, true} {
		l := newStreamLoader(t, src, Config{BatchSize: 4, Workers: 3, DropLast: dropLast})
		got := drainStream(t, l)
		n := 6
		if dropLast {
			n = 5
		}
		if len(got) != n || l.NumBatches() != -1 {
			t.Fatalf("dropLast %v: %d batches, want %d", dropLast, len(got), n)
		}
		for k, b := range got {
			for p := range b.N {
				if i := sampleOf(b, p); i != 4*k+p || b.Y[p] != int64(i%10) {
					t.Fatalf("batch %d position %d holds %d (label %d)", k, p, i, b.Y[p])
				}
			}
		}
	}
	// Shuffled: a permutation, different per epoch, the same for any
	// number of workers, and resumable.
	cfg := Config{BatchSize: 4, Workers: 1, Shuffle: true, ShuffleBuffer: 6, Seed: 3,
		Transforms: []Transform{RandomCrop{Height: 4, Width: 4, Padding: 1}, HorizontalFlip{}}}
	plain := cfg
	plain.Transforms = nil
	l := newStreamLoader(t, src, plain)
	var orders [2][]int
	for e := range 2 {
		for _, b := range drainStream(t, l) {
			for p := range b.N {
				orders[e] = append(orders[e], sampleOf(b, p))
			}
		}
		sorted := slices.Sorted(slices.Values(orders[e]))
		if !slices.Equal(sorted, seqInts(21)) {
			t.Fatalf("epoch %d order %v is not a permutation", e, orders[e])
		}
	}
	if slices.Equal(orders[0], orders[1]) || slices.Equal(orders[0], seqInts(21)) {
		t.Errorf("shuffled orders %v and %v", orders[0], orders[1])
	}
	one := drainStream(t, newStreamLoader(t, src, cfg))
	cfg4 := cfg
	cfg4.Workers = 4
	four := drainStream(t, newStreamLoader(t, src, cfg4))
	for k := range one {
		if !slices.Equal(one[k].X, four[k].X) || !slices.Equal(one[k].Y, four[k].Y) {
			t.Fatalf("batch %d differs between 1 and 4 workers", k)
		}
	}
	for _, k := range []int{1, 4, 6} {
		c := cfg4
		c.Start = State{Step: k}
		got := drainStream(t, newStreamLoader(t, src, c))
		if len(got) != len(one)-k {
			t.Fatalf("resume at %d: %d batches, want %d", k, len(got), len(one)-k)
		}
		for j := range got {
			if got[j].Step != k+j || !slices.Equal(got[j].X, one[k+j].X) || !slices.Equal(got[j].Y, one[k+j].Y) {
				t.Fatalf("resume at %d: batch %d differs", k, j)
			}
		}
	}
	m := newStreamLoader(t, src, cfg).Memory()
	if m.Shuffle != int64(6+3*4)*DefaultMaxRecordBytes {
		t.Errorf("stream shuffle memory %d", m.Shuffle)
	}
}

func seqInts(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

func TestStreamLoaderBadSamples(t *testing.T) {
	dir := t.TempDir()
	var keys []string
	var fields [][]Part
	for i := range 6 {
		keys = append(keys, fmt.Sprintf("%06d", i))
		png := encodePNG(t, testImage(4, 4, uint8(i)))
		if i == 2 {
			png = png[:30]
		}
		fields = append(fields, []Part{{Ext: "png", Data: png}, {Ext: "cls", Data: []byte("1")}})
	}
	var b bytes.Buffer
	if err := WriteShard(&b, keys, fields); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "s.tar")
	writeFile(t, p, b.Bytes())
	l := newStreamLoader(t, &Shards{Paths: []string{p}}, Config{BatchSize: 4, Workers: 2})
	_, err := l.Next(t.Context())
	var se *SampleError
	if !errors.As(err, &se) || se.File != p || se.Member != "000002.png" {
		t.Fatalf("corrupt PNG: %v", err)
	}
	l = newStreamLoader(t, &Shards{Paths: []string{p}}, Config{BatchSize: 4, Workers: 2, SkipBad: true})
	got := drainStream(t, l)
	if len(got) != 2 || got[0].N != 3 || sampleOf(got[0], 2) != 3 || l.Stats().Skipped != 1 {
		t.Errorf("skip: %d batches, first of %d, skipped %d", len(got), got[0].N, l.Stats().Skipped)
	}
}

// pipeShards serves its first Open (the loader's probe) from a complete
// shard, and later ones from a pipe the test writes, to stall a read.
type pipeShards struct {
	Shards
	full  []byte
	r     *os.File
	opens atomic.Int32
}

func (p *pipeShards) Open(ctx context.Context, epoch int) (Stream, error) {
	first := p.opens.Add(1) == 1
	return &tarStream{src: &p.Shards, paths: p.Paths, open: func(context.Context, string) (io.ReadCloser, error) {
		if first {
			return io.NopCloser(bytes.NewReader(p.full)), nil
		}
		return p.r, nil
	}}, nil
}

// A read that never returns (a FIFO, a stalled disk) does not make the
// loader deaf to cancellation, and leaves no goroutine behind.
func TestStreamLoaderCancelBlockedRead(t *testing.T) {
	base := runtime.NumGoroutine()
	full := shardBytes(t, 0, 8)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	src := &pipeShards{Shards: Shards{Paths: []string{"pipe.tar"}}, full: full, r: r}
	l, err := NewStreamLoader(src, Config{BatchSize: 2, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	// Enough for two whole records and the header of the third; then the
	// pipe stays open and silent.
	two := len(shardBytes(t, 0, 2)) - 1024 // without the end marker
	if _, err := w.Write(full[:two+512]); err != nil {
		t.Fatal(err)
	}
	if b, err := l.Next(t.Context()); err != nil || b.N != 2 {
		t.Fatalf("first batch: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	stop := time.AfterFunc(20*time.Millisecond, cancel)
	defer stop.Stop()
	if _, err := l.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next on a stalled stream: %v", err)
	}
	l.Close()
	if !settle(base) {
		t.Errorf("%d goroutines after Close, %d before", runtime.NumGoroutine(), base)
	}
}

// A non-regular member carrying data is refused rather than skipped:
// skipping means reading it, and a sparse member's logical size can be
// terabytes of holes.
func TestShardsNonRegularMember(t *testing.T) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if err := tw.WriteHeader(&tar.Header{Name: "000001.dat", Typeflag: tar.TypeChar, Size: 4, Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	tw.Write([]byte("abcd"))
	tw.Close()
	p := filepath.Join(t.TempDir(), "s.tar")
	writeFile(t, p, b.Bytes())
	_, err := readAll(t, &Shards{Paths: []string{p}})
	var se *SampleError
	if !errors.As(err, &se) || se.Member != "000001.dat" {
		t.Errorf("non-regular member: %v", err)
	}
}

func TestShardsShuffle(t *testing.T) {
	paths := makeShards(t, 6, 1)
	src := &Shards{Paths: paths, ShuffleShards: true, Seed: 4}
	order := func(epoch int) []string {
		st, err := src.Open(t.Context(), epoch)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		var keys []string
		var r Record
		for st.Next(t.Context(), &r) == nil {
			keys = append(keys, r.Key)
		}
		return keys
	}
	e0, e1, again := order(0), order(1), order(0)
	if len(e0) != 6 || !slices.Equal(e0, again) || slices.Equal(e0, e1) || slices.IsSorted(e0) && slices.IsSorted(e1) {
		t.Errorf("shard orders %v, %v, again %v", e0, e1, again)
	}
	if !slices.Equal(slices.Sorted(slices.Values(e1)), []string{"000000", "000001", "000002", "000003", "000004", "000005"}) {
		t.Errorf("epoch 1 reads %v", e1)
	}
	// The loader's memory report for a stream, planned and held.
	cfg := Config{BatchSize: 2, Shuffle: true, ShuffleBuffer: 3, MaxRecordBytes: 1000, Depth: 2, Workers: 2}
	m, err := PlanMemory(src, cfg)
	if err != nil {
		t.Fatal(err)
	}
	l := newStreamLoader(t, src, cfg)
	if m != l.Memory() || m.Shuffle != (3+3*2)*1000 || m.StagingBuffer != 2*(3*4*4*4+8) {
		t.Errorf("planned %+v, held %+v", m, l.Memory())
	}
}
