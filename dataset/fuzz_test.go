package dataset

import (
	"bytes"
	"context"
	"errors"
	"image"
	"io"
	"strings"
	"testing"
)

// Every parser must reject bad input with an error, never panic or hang,
// and what it accepts must be self-consistent.

func FuzzParseCSV(f *testing.F) {
	for _, s := range []string{"1,2,0\n3,4,1\n", "a,b,y\n1,2,0\n", "1\t2\t3\n", "\"1\",2,x\n", "1,2\n3\n", ",,\n", "1e40,1,1\n"} {
		f.Add(s, false, -1, false, false)
	}
	f.Fuzz(func(t *testing.T, text string, header bool, label int, names, skip bool) {
		for _, comma := range []rune{',', '\t'} {
			tab, err := ParseCSV(strings.NewReader(text), "f.csv", CSVOptions{Comma: comma, Header: header, LabelIndex: label, ClassNames: names, SkipBad: skip})
			if err != nil {
				if !strings.Contains(err.Error(), "f.csv") {
					t.Fatalf("error %q does not name the file", err)
				}
				var se *SampleError
				if errors.As(err, &se) && se.Row <= 0 {
					t.Fatalf("sample error without a row: %v", err)
				}
				continue
			}
			if len(tab.Features) != tab.Len()*tab.NumFeatures() || len(tab.Columns) != tab.NumFeatures() {
				t.Fatalf("%d features for %d rows of %d", len(tab.Features), tab.Len(), tab.NumFeatures())
			}
			for _, l := range tab.Labels {
				if l < 0 || (names && int(l) >= len(tab.Classes)) {
					t.Fatalf("label %d (classes %v)", l, tab.Classes)
				}
			}
			var ex Example
			for i := range tab.Len() {
				if err := tab.Get(i, &ex); err != nil || len(ex.X) != tab.NumFeatures() {
					t.Fatalf("Get(%d): %v", i, err)
				}
			}
		}
	})
}

func FuzzParseTokens(f *testing.F) {
	body, _ := WriteTokens([]int64{1, 2, 3}, 2)
	f.Add(body, 0)
	f.Add(append(llmcHeader(1, 3), body...), 0)
	f.Add(append(llmcHeader(2, 1), 1, 2, 3, 4), 4)
	f.Add([]byte{1, 2, 3}, 2)
	f.Fuzz(func(t *testing.T, data []byte, width int) {
		tok, w, header, err := parseTokens(data, "f.bin", width)
		if err != nil {
			var se *SampleError
			if errors.As(err, &se) && (se.File != "f.bin" || se.Offset < 0 || se.Offset > int64(len(data))) {
				t.Fatalf("error %v: offset %d of %d bytes", err, se.Offset, len(data))
			}
			if !strings.Contains(err.Error(), "f.bin") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		if (w != 2 && w != 4) || len(tok)%w != 0 || (width != 0 && w != width) {
			t.Fatalf("width %d (asked %d), %d token bytes", w, width, len(tok))
		}
		if header && len(tok) != len(data)-tokenHeaderSize {
			t.Fatalf("header file: %d token bytes of %d", len(tok), len(data))
		}
		ctx := 1 + len(tok)%5
		tf := &TokenFile{Width: w, Context: ctx, Stride: 1 + len(data)%3, tokens: tok}
		var ex Example
		for i := range tf.Len() {
			if err := tf.Get(i, &ex); err != nil || len(ex.Tokens) != ctx || len(ex.Y) != ctx {
				t.Fatalf("window %d: %v", i, err)
			}
		}
	})
}

func FuzzShardStream(f *testing.F) {
	good := shardBytes(f, 0, 2)
	f.Add(good)
	f.Add(good[:len(good)-1024])
	f.Add(good[:700])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		src := &Shards{Paths: []string{"s.tar"}, MaxRecordBytes: 1 << 16}
		st := &tarStream{src: src, paths: src.Paths, open: func(context.Context, string) (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(data)), nil
		}}
		defer st.Close()
		var r Record
		for range 1000 {
			err := st.Next(context.Background(), &r)
			if err == io.EOF {
				return
			}
			if err != nil {
				var se *SampleError
				if !errors.As(err, &se) || se.File != "s.tar" {
					t.Fatalf("error %v does not name the shard", err)
				}
				return
			}
			if r.n == 0 || r.Bytes() > src.MaxRecordBytes {
				t.Fatalf("record %q of %d parts, %d bytes", r.Key, r.n, r.Bytes())
			}
			for _, p := range r.Fields() {
				if k, _ := splitKey(r.Key + "." + p.Ext); k != r.Key {
					t.Fatalf("part %q does not belong to key %q", p.Ext, r.Key)
				}
			}
			var ex Example
			_ = src.Decode(&r, &ex) // must not panic
		}
		t.Fatal("more than 1000 records from a fuzzed shard")
	})
}

func FuzzDecodeImage(f *testing.F) {
	f.Add(encodePNG(f, testImage(3, 2, 1)), 3)
	f.Add(encodeJPEG(f, testImage(8, 8, 1)), 3)
	f.Add(encodePNG(f, image.NewGray(image.Rect(0, 0, 2, 2))), 1)
	f.Add([]byte("\x89PNG\r\n\x1a\n"), 3)
	f.Fuzz(func(t *testing.T, data []byte, channels int) {
		out, h, w, err := decodeImage(data, "i.png", channels, nil, 1<<16)
		if err != nil {
			if !strings.Contains(err.Error(), "i.png") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		if len(out) != channels*h*w || h <= 0 || w <= 0 {
			t.Fatalf("%d values for %d x %d x %d", len(out), channels, h, w)
		}
		for _, v := range out {
			if !(v >= 0 && v <= 1) {
				t.Fatalf("value %v outside [0,1]", v)
			}
		}
	})
}
