package dataset

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
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
