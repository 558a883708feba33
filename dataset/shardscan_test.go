package dataset

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestShardsScan(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, keys []string, fields [][]Part) string {
		var b bytes.Buffer
		if err := WriteShard(&b, keys, fields); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := write("a.tar", []string{"1", "2"}, [][]Part{
		{{"png", make([]byte, 100)}, {"cls", []byte("0")}},
		{{"png", make([]byte, 30)}, {"cls", []byte("12")}},
	})
	b := write("b.tar", []string{"3"}, [][]Part{{{"jpg", make([]byte, 70)}, {"cls", []byte("1")}, {"txt", make([]byte, 5)}}})
	for _, c := range []struct {
		paths     []string
		n, record int
	}{
		{[]string{a}, 2, 100 + 2},
		{[]string{b}, 1, 70 + 1 + 5},
		{[]string{a, b}, 3, 100 + 2 + 5},
	} {
		st, err := (&Shards{Paths: c.paths}).Scan(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if st.Samples != c.n || st.MaxRecordBytes != c.record {
			t.Errorf("%v: %+v, want %d samples, %d bytes a record", c.paths, st, c.n, c.record)
		}
	}
	// A shard that is not a regular file is refused before it is opened
	// (a FIFO's open would wait for a writer).
	if _, err := (&Shards{Paths: []string{dir}}).Scan(t.Context()); !errors.Is(err, ErrNotRegular) {
		t.Errorf("a directory as a shard: %v, want ErrNotRegular", err)
	}
	// A shard cut inside a header is named.
	data, _ := os.ReadFile(a)
	cut := filepath.Join(dir, "cut.tar")
	if err := os.WriteFile(cut, data[:512+512+100], 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := (&Shards{Paths: []string{cut}}).Scan(t.Context())
	var se *SampleError
	if !errors.As(err, &se) || se.File != cut {
		t.Errorf("cut shard: %v, want a SampleError naming %s", err, cut)
	}
}

// Scan reads the image members' headers for the largest image (the
// loader's scratch is planned for it), and under SkipBad ends a shard cut
// inside a header there, counting it, instead of failing.
func TestShardsScanLargestAndCut(t *testing.T) {
	dir := t.TempDir()
	var b bytes.Buffer
	keys := []string{"1", "2", "3"}
	fields := [][]Part{
		{{"png", encodePNG(t, testImage(6, 5, 1))}, {"cls", []byte("0")}},
		{{"jpg", encodeJPEG(t, testImage(20, 9, 2))}, {"cls", []byte("1")}},
		{{"png", encodePNG(t, testImage(8, 8, 3))}, {"cls", []byte("0")}},
	}
	if err := WriteShard(&b, keys, fields); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "a.tar")
	writeFile(t, p, b.Bytes())
	st, err := (&Shards{Paths: []string{p}, Channels: 1}).Scan(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{1, 9, 20}; !slices.Equal(st.Largest, want) || st.Samples != 3 || st.Cut != 0 {
		t.Errorf("scan %+v, want the largest image %v of 3 samples", st, want)
	}
	// Cut inside the third record's first header: two records before it.
	hdr := 0
	for i := range 2 {
		for _, f := range fields[i] {
			hdr += 512 + (len(f.Data)+511)/512*512
		}
	}
	cut := filepath.Join(dir, "cut.tar")
	writeFile(t, cut, b.Bytes()[:hdr+100])
	if _, err := (&Shards{Paths: []string{cut, p}}).Scan(t.Context()); !errors.Is(err, ErrTruncated) {
		t.Errorf("cut shard: %v, want ErrTruncated", err)
	}
	st, err = (&Shards{Paths: []string{cut, p}, SkipBad: true}).Scan(t.Context())
	if err != nil || st.Samples != 2+3 || st.Cut != 1 {
		t.Errorf("cut shard under SkipBad: %+v, %v; want 5 samples, 1 shard cut", st, err)
	}
}

// An image folder of mixed sizes reports its largest image (from the
// files' headers) and its largest file, and the loader plans for it.
func TestImageFolderSampleBound(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "a", "0.png"), encodePNG(t, testImage(4, 4, 1)))
	big := encodePNG(t, testImage(30, 10, 2))
	writeFile(t, filepath.Join(root, "a", "1.png"), big)
	jpg := encodeJPEG(t, testImage(12, 16, 3))
	writeFile(t, filepath.Join(root, "b", "0.jpg"), jpg)
	writeFile(t, filepath.Join(root, "b", "1.png"), []byte("not an image"))
	f, err := OpenImageFolder(root, 3)
	if err != nil {
		t.Fatal(err)
	}
	bound, err := f.SampleBound()
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{3, 10, 30}; !slices.Equal(bound.Shape, want) || bound.Bytes != int64(max(len(big), len(jpg))) {
		t.Errorf("bound %+v, want shape %v and %d bytes", bound, want, max(len(big), len(jpg)))
	}
	m, err := PlanMemory(f, Config{BatchSize: 2, Transforms: []Transform{Resize{Height: 2, Width: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	if want := int64((3*10*30+3*2*2)*4+8) + bound.Bytes + 10*30*4; m.ScratchPerWorker != want {
		t.Errorf("scratch per worker %d, want %d (for the 30x10 image)", m.ScratchPerWorker, want)
	}
}
