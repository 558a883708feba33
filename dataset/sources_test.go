package dataset

import (
	"bytes"
	"errors"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/idx"
)

// testImage is an RGB image whose pixels encode position and a seed.
func testImage(w, h int, seed uint8) *image.NRGBA {
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.SetNRGBA(x, y, color.NRGBA{R: uint8(x*10) + seed, G: uint8(y * 20), B: seed, A: 255})
		}
	}
	return img
}

func encodePNG(t testing.TB, img image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func encodeJPEG(t testing.TB, img image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := jpeg.Encode(&b, img, &jpeg.Options{Quality: 95}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestDecodeImage(t *testing.T) {
	img := testImage(5, 3, 7)
	x, h, w, err := DecodeImage(encodePNG(t, img), "a.png", 3, nil)
	if err != nil || h != 3 || w != 5 || len(x) != 45 {
		t.Fatalf("DecodeImage: %d x %d, %d values, %v", h, w, len(x), err)
	}
	// CHW: channel 0 (red) of pixel (x=2, y=1) is 2*10+7.
	if got, want := x[0*15+1*5+2], float32(27)/255; got != want {
		t.Errorf("R(2,1) = %v, want %v", got, want)
	}
	if got, want := x[1*15+1*5+2], float32(20)/255; got != want {
		t.Errorf("G(2,1) = %v, want %v", got, want)
	}
	// The fast paths agree with the generic conversion.
	rgba := image.NewRGBA(image.Rect(0, 0, 5, 3))
	for i := range rgba.Pix {
		rgba.Pix[i] = uint8(i * 37)
		if i%4 == 3 && i%8 != 3 {
			rgba.Pix[i] = 255 // half the pixels opaque, half translucent
		}
	}
	for _, im := range []image.Image{img, rgba, image.NewGray(image.Rect(0, 0, 5, 3))} {
		for _, c := range []int{1, 3} {
			fast := make([]float32, c*15)
			toCHW(im, c, fast)
			slow := make([]float32, c*15)
			toCHW(struct{ image.Image }{im}, c, slow) // hides the concrete type
			for i := range fast {
				if math.Abs(float64(fast[i]-slow[i])) > 1e-6 {
					t.Fatalf("%T %d channels: value %d fast %v generic %v", im, c, i, fast[i], slow[i])
				}
			}
		}
	}
	// JPEG is lossy: close to the original.
	xj, _, _, err := DecodeImage(encodeJPEG(t, img), "a.jpg", 3, make([]float32, 0, 100))
	if err != nil {
		t.Fatal(err)
	}
	for i := range x {
		if math.Abs(float64(xj[i]-x[i])) > 0.1 {
			t.Fatalf("JPEG value %d is %v, PNG %v", i, xj[i], x[i])
		}
	}
	// Gray.
	g := image.NewGray(image.Rect(0, 0, 2, 1))
	g.Pix[1] = 255
	xg, _, _, err := DecodeImage(encodePNG(t, g), "g.png", 1, nil)
	if err != nil || !slices.Equal(xg, []float32{0, 1}) {
		t.Errorf("gray: %v %v", xg, err)
	}
	// Bad input names the file: nothing, not an image, a truncated PNG, a
	// PNG with a corrupt byte in its pixel data (its checksum fails), a
	// truncated JPEG and a JPEG whose frame header is corrupt.
	data := encodePNG(t, img)
	corruptPNG := slices.Clone(data)
	corruptPNG[len(corruptPNG)-20] ^= 0xff // inside the last IDAT chunk, before IEND
	jpg := encodeJPEG(t, img)
	corruptJPG := slices.Clone(jpg)
	if i := bytes.Index(corruptJPG, []byte{0xff, 0xc0}); i < 0 {
		t.Fatal("no SOF0 marker in the JPEG")
	} else {
		corruptJPG[i+4] = 0xff // the frame header's length and precision
		corruptJPG[i+5] = 0xff
	}
	for _, bad := range [][]byte{nil, []byte("not an image"), data[:len(data)/2], corruptPNG, jpg[:len(jpg)/2], corruptJPG} {
		_, _, _, err := DecodeImage(bad, "bad.png", 3, nil)
		var se *SampleError
		if !errors.As(err, &se) || se.File != "bad.png" || !strings.Contains(err.Error(), "bad.png") {
			t.Errorf("DecodeImage of %d bytes: %v, want a SampleError naming bad.png", len(bad), err)
		}
	}
	if _, _, _, err := DecodeImage(data, "x", 2, nil); err == nil {
		t.Error("2 channels accepted")
	}
}

func TestImageFolder(t *testing.T) {
	root := t.TempDir()
	// Classes sort as names: "b" < "cat" < "dog".
	writeFile(t, filepath.Join(root, "dog", "2.png"), encodePNG(t, testImage(4, 4, 2)))
	writeFile(t, filepath.Join(root, "dog", "1.jpg"), encodeJPEG(t, testImage(4, 4, 1)))
	writeFile(t, filepath.Join(root, "cat", "sub", "z.jpeg"), encodeJPEG(t, testImage(4, 4, 3)))
	writeFile(t, filepath.Join(root, "cat", "notes.txt"), []byte("ignored"))
	writeFile(t, filepath.Join(root, "b", "a.PNG"), encodePNG(t, testImage(4, 4, 4)))
	f, err := OpenImageFolder(root, 3)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.Classes, []string{"b", "cat", "dog"}) || !slices.Equal(f.Labels, []int{0, 1, 2, 2}) {
		t.Fatalf("classes %v labels %v", f.Classes, f.Labels)
	}
	if f.Len() != 4 || filepath.Base(f.Paths[2]) != "1.jpg" || f.Name(3) != f.Paths[3] {
		t.Fatalf("paths %v", f.Paths)
	}
	// Nested folders in torchvision's order: a folder's own files before
	// its subfolders' ("c.png" before "b/z.png"), though the whole paths
	// sort the other way.
	nest := t.TempDir()
	for _, p := range []string{"k/c.png", "k/b/z.png", "k/b-x.png"} {
		writeFile(t, filepath.Join(nest, p), encodePNG(t, testImage(2, 2, 0)))
	}
	nf, err := OpenImageFolder(nest, 1)
	if err != nil {
		t.Fatal(err)
	}
	var rel []string
	for _, p := range nf.Paths {
		r, _ := filepath.Rel(nest, p)
		rel = append(rel, filepath.ToSlash(r))
	}
	if want := []string{"k/b-x.png", "k/c.png", "k/b/z.png"}; !slices.Equal(rel, want) {
		t.Errorf("nested order %v, want %v", rel, want)
	}
	var ex Example
	if err := f.Get(3, &ex); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ex.Shape, []int{3, 4, 4}) || !slices.Equal(ex.Y, []int64{2}) || ex.X[1] != float32(12)/255 {
		t.Errorf("sample 3: shape %v label %v x[1] %v", ex.Shape, ex.Y, ex.X[1])
	}

	// An empty class folder and a corrupt image are errors naming them.
	if err := os.Mkdir(filepath.Join(root, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenImageFolder(root, 3); !errors.Is(err, ErrEmptyClass) || !strings.Contains(err.Error(), `"empty"`) {
		t.Errorf("empty class: %v", err)
	}
	os.Remove(filepath.Join(root, "empty"))
	writeFile(t, filepath.Join(root, "dog", "3.png"), encodePNG(t, testImage(4, 4, 5))[:40])
	f, err = OpenImageFolder(root, 1)
	if err != nil {
		t.Fatal(err)
	}
	err = f.Get(4, &ex)
	var se *SampleError
	if !errors.As(err, &se) || !strings.HasSuffix(se.File, "3.png") || se.Index != 4 {
		t.Errorf("truncated PNG: %v", err)
	}
	if _, err := OpenImageFolder(t.TempDir(), 3); err == nil {
		t.Error("a folder without classes accepted")
	}
}

// Images of mixed sizes go through a loader when a Resize makes them agree,
// and are an error naming the file when nothing does.
func TestImageFolderLoader(t *testing.T) {
	root := t.TempDir()
	for i := range 6 {
		writeFile(t, filepath.Join(root, []string{"a", "b"}[i%2], string(rune('0'+i))+".png"), encodePNG(t, testImage(6+i, 5, uint8(i))))
	}
	f, err := OpenImageFolder(root, 3)
	if err != nil {
		t.Fatal(err)
	}
	l := newLoader(t, f, Config{BatchSize: 4, Workers: 2, Transforms: []Transform{Resize{Height: 4, Width: 4}}})
	got := drain(t, l, t.Context())
	if len(got) != 2 || got[0].N != 4 || len(got[0].X) != 4*3*16 || got[1].N != 2 {
		t.Fatalf("batches %+v", got)
	}
	l2 := newLoader(t, f, Config{BatchSize: 4})
	_, err = l2.Next(t.Context())
	if !errors.Is(err, ErrShape) || !strings.Contains(err.Error(), ".png") {
		t.Errorf("mixed sizes without a resize: %v", err)
	}
}

func TestIDXSources(t *testing.T) {
	d, err := Load(Subset(), Embedded, Test)
	if err != nil {
		t.Fatal(err)
	}
	idxs := []int{3, 0, 499}
	want := make([]float32, 3*Pixels)
	if err := d.Batch(idxs, want, nil); err != nil {
		t.Fatal(err)
	}
	l := newLoader(t, d, Config{BatchSize: 3})
	if !slices.Equal(l.Shape(), []int{1, Rows, Cols}) {
		t.Errorf("shape %v", l.Shape())
	}
	var ex Example
	for k, i := range idxs {
		if err := d.Get(i, &ex); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ex.X, want[k*Pixels:(k+1)*Pixels]) || ex.Y[0] != int64(d.Labels[i]) {
			t.Fatalf("Get(%d) differs from Batch", i)
		}
	}
	// Through a loader with Normalize: bit for bit NormalizedBatch.
	nl := newLoader(t, d, Config{BatchSize: 7, Workers: 3, Transforms: []Transform{Normalize{Mean: []float32{TrainMean}, Std: []float32{TrainStd}}}})
	b, err := nl.Next(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	nb := make([]float32, 7*Pixels)
	ny := make([]int64, 7)
	if err := d.NormalizedBatch([]int{0, 1, 2, 3, 4, 5, 6}, nb, ny, TrainMean, TrainStd); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(b.X, nb) || !slices.Equal(b.Y, ny) {
		t.Error("loader with Normalize differs from NormalizedBatch")
	}
	// The generic IDX source over the same files.
	raw := func(name string) *idx.File {
		fh, err := Subset().Open(name)
		if err != nil {
			t.Fatal(err)
		}
		defer fh.Close()
		f, err := idx.Decode(fh, name)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	src, err := NewIDX(raw("t10k-images-idx3-ubyte.gz"), raw("t10k-labels-idx1-ubyte.gz"))
	if err != nil {
		t.Fatal(err)
	}
	var ex2 Example
	if err := src.Get(499, &ex2); err != nil || src.Len() != 500 || !slices.Equal(ex2.X, want[2*Pixels:]) || !slices.Equal(ex2.Shape, []int{Rows, Cols}) {
		t.Errorf("IDX Get(499): shape %v, %v", ex2.Shape, err)
	}
	f32 := &idx.File{Name: "f", Type: idx.Float32, Dims: []int{2, 2}, Data: []byte{0x3f, 0x80, 0, 0, 0x40, 0, 0, 0, 0xbf, 0x80, 0, 0, 0, 0, 0, 0}}
	lab := &idx.File{Name: "l", Type: idx.Uint8, Dims: []int{2}, Data: []byte{1, 0}}
	s2, err := NewIDX(f32, lab)
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Get(1, &ex2); err != nil || !slices.Equal(ex2.X, []float32{-1, 0}) || ex2.Y[0] != 0 {
		t.Errorf("float IDX: %v %v %v", ex2.X, ex2.Y, err)
	}
	if _, err := NewIDX(f32, &idx.File{Name: "l", Type: idx.Uint8, Dims: []int{3}, Data: []byte{1, 0, 1}}); err == nil {
		t.Error("3 labels for 2 samples accepted")
	}
}

func TestCSV(t *testing.T) {
	tests := []struct {
		name, text string
		opt        CSVOptions
		features   []float32
		labels     []int64
		classes    []string
		columns    []string
		skipped    int
		err        string // substring of the error, when one is wanted
	}{
		{name: "last column", text: "1,2,0\n3,4.5,1\n", opt: CSVOptions{LabelIndex: -1}, features: []float32{1, 2, 3, 4.5}, labels: []int64{0, 1}, columns: []string{"c0", "c1"}},
		{name: "first column by default", text: "0,1,2\n1,3,4\n", features: []float32{1, 2, 3, 4}, labels: []int64{0, 1}, columns: []string{"c1", "c2"}},
		{name: "header by name", text: "y,a,b\n1,2,3\n0, 5 ,6\n", opt: CSVOptions{Header: true, Label: "y"}, features: []float32{2, 3, 5, 6}, labels: []int64{1, 0}, columns: []string{"a", "b"}},
		{name: "tsv index", text: "a\tb\tc\n1\t7\t2\n", opt: CSVOptions{Comma: '\t', Header: true, LabelIndex: 1}, features: []float32{1, 2}, labels: []int64{7}, columns: []string{"a", "c"}},
		{name: "class names", text: "1,setosa\n2,virginica\n3,setosa\n", opt: CSVOptions{ClassNames: true, LabelIndex: -1}, features: []float32{1, 2, 3}, labels: []int64{0, 1, 0}, classes: []string{"setosa", "virginica"}, columns: []string{"c0"}},
		{name: "not a number", text: "a,b,y\n1,2,0\n3,x,1\n", opt: CSVOptions{Header: true}, err: "t.csv: row 3: column 2: not a number: \"x\""},
		{name: "bad label", text: "1,2,zero\n", opt: CSVOptions{LabelIndex: -1}, err: "t.csv: row 1: column 3: bad label"},
		{name: "ragged", text: "1,2,0\n1,0\n", err: "t.csv: row 2: column 1: wrong number of fields"},
		{name: "skip", text: "1,2,0\n3,x,1\n4,5\n6,7,1\n8,9,-1\n", opt: CSVOptions{SkipBad: true, LabelIndex: -1}, features: []float32{1, 2, 6, 7}, labels: []int64{0, 1}, columns: []string{"c0", "c1"}, skipped: 3},
		{name: "no such label", text: "a,b\n1,2\n", opt: CSVOptions{Header: true, Label: "y"}, err: `no column "y"`},
		{name: "label without header", text: "1,2\n", opt: CSVOptions{Label: "y"}, err: "no header"},
		{name: "one column", text: "1\n2\n", err: "1 column"},
		{name: "empty", text: "", err: "empty table"},
	}
	for _, tt := range tests {
		tab, err := ParseCSV(strings.NewReader(tt.text), "t.csv", tt.opt)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: error %v, want %q", tt.name, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if !slices.Equal(tab.Features, tt.features) || !slices.Equal(tab.Labels, tt.labels) || !slices.Equal(tab.Classes, tt.classes) ||
			!slices.Equal(tab.Columns, tt.columns) || tab.Skipped != tt.skipped {
			t.Errorf("%s: features %v labels %v classes %v columns %v skipped %d", tt.name, tab.Features, tab.Labels, tab.Classes, tab.Columns, tab.Skipped)
		}
	}
	// A table error is a SampleError with row and column.
	_, err := ParseCSV(strings.NewReader("1,a,0\n"), "t.csv", CSVOptions{})
	var se *SampleError
	if !errors.As(err, &se) || se.Row != 1 || se.Column != 2 || !errors.Is(err, ErrNotNumber) {
		t.Errorf("error %#v", err)
	}
	// Through a loader, from a file.
	path := filepath.Join(t.TempDir(), "t.csv")
	writeFile(t, path, []byte("f1,f2,label\n1,2,0\n3,4,1\n5,6,0\n"))
	tab, err := ReadCSV(path, CSVOptions{Header: true, Label: "label"})
	if err != nil {
		t.Fatal(err)
	}
	l := newLoader(t, tab, Config{BatchSize: 2, Transforms: []Transform{Normalize{Mean: []float32{1, 2}, Std: []float32{2, 2}}}})
	got := drain(t, l, t.Context())
	if len(got) != 2 || !slices.Equal(got[0].X, []float32{0, 0, 1, 1}) || !slices.Equal(got[1].Y, []int64{0}) {
		t.Errorf("batches %+v", got)
	}
}

func writeTokens(t testing.TB, tokens []int64, width int) string {
	t.Helper()
	data, err := WriteTokens(tokens, width)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "train.bin")
	writeFile(t, path, data)
	return path
}

func TestTokenFile(t *testing.T) {
	tokens := make([]int64, 21)
	for i := range tokens {
		tokens[i] = int64(i*1000 + 7)
	}
	for _, width := range []int{2, 4} {
		path := writeTokens(t, tokens, width)
		for _, tt := range []struct{ stride, n int }{{0, 5}, {4, 5}, {1, 17}, {3, 6}} {
			f, err := OpenTokens(path, TokenOptions{Width: width, Context: 4, Stride: tt.stride})
			if err != nil {
				t.Fatal(err)
			}
			if f.Len() != tt.n || f.NumTokens() != 21 {
				t.Errorf("width %d stride %d: %d windows of %d tokens, want %d", width, tt.stride, f.Len(), f.NumTokens(), tt.n)
			}
			var ex Example
			last := f.Len() - 1
			if err := f.Get(last, &ex); err != nil {
				t.Fatal(err)
			}
			s := last * f.Stride
			if !slices.Equal(ex.Tokens, tokens[s:s+4]) || !slices.Equal(ex.Y, tokens[s+1:s+5]) || !slices.Equal(ex.Shape, []int{4}) {
				t.Errorf("width %d stride %d: window %d is %v -> %v", width, tt.stride, last, ex.Tokens, ex.Y)
			}
			f.Close()
		}
	}
	// Through a loader: token batches [B, T] and targets [B, T].
	f, err := OpenTokens(writeTokens(t, tokens, 2), TokenOptions{Context: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() }) // after the loader's Close: cleanups run last-in first-out
	l := newLoader(t, f, Config{BatchSize: 2, DropLast: true})
	b, err := l.Next(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if b.X != nil || !slices.Equal(b.Tokens, tokens[:8]) || !slices.Equal(b.Y, append(slices.Clone(tokens[1:5]), tokens[5:9]...)) {
		t.Errorf("batch tokens %v targets %v", b.Tokens, b.Y)
	}
	if m := l.Memory(); m.StagingBuffer != 2*4*8*2 {
		t.Errorf("staging %d bytes", m.StagingBuffer)
	}
	if _, err := NewLoader(f, Config{BatchSize: 2, Transforms: []Transform{HorizontalFlip{}}}); err == nil {
		t.Error("transforms on tokens accepted")
	}

	// A size that is not a multiple of the width names file and offset.
	path := filepath.Join(t.TempDir(), "odd.bin")
	writeFile(t, path, make([]byte, 9))
	_, err = OpenTokens(path, TokenOptions{Width: 4, Context: 1})
	var se *SampleError
	if !errors.As(err, &se) || se.File != path || se.Offset != 8 || !errors.Is(err, ErrTruncated) {
		t.Errorf("odd size: %v", err)
	}
	if _, err := OpenTokens(path, TokenOptions{Context: 0}); err == nil {
		t.Error("context 0 accepted")
	}
	if _, err := WriteTokens([]int64{70000}, 2); err == nil {
		t.Error("70000 written as uint16")
	}
}

// llmcHeader builds llm.c's token file header.
func llmcHeader(version, count uint32) []byte {
	h := make([]byte, tokenHeaderSize)
	for i, v := range []uint32{tokenMagic, version, count} {
		h[4*i], h[4*i+1], h[4*i+2], h[4*i+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
	}
	return h
}

func TestTokenHeader(t *testing.T) {
	body, _ := WriteTokens([]int64{1, 2, 3}, 2)
	body4, _ := WriteTokens([]int64{1, 2, 3}, 4)
	tests := []struct {
		name  string
		data  []byte
		width int
		want  int // width found; 0 for an error
		off   int64
	}{
		{"llm.c v1", append(llmcHeader(1, 3), body...), 0, 2, 0},
		{"llm.c v2", append(llmcHeader(2, 3), body4...), 0, 4, 0},
		{"llm.c v2 asked 2", append(llmcHeader(2, 3), body4...), 2, 0, 4},
		{"llm.c bad version", append(llmcHeader(7, 3), body...), 0, 0, 4},
		{"llm.c count", append(llmcHeader(1, 4), body...), 0, 0, 8},
		{"llm.c short", llmcHeader(1, 0)[:100], 0, 0, 100},
		{"plain", body, 0, 2, 0},
		{"odd", body[:5], 2, 0, 4},
	}
	for _, tt := range tests {
		tok, w, header, err := parseTokens(tt.data, "f.bin", tt.width)
		if tt.want == 0 {
			var se *SampleError
			if !errors.As(err, &se) || se.Offset != tt.off || se.File != "f.bin" {
				t.Errorf("%s: error %v, want one at offset %d", tt.name, err, tt.off)
			}
			continue
		}
		if err != nil || w != tt.want || len(tok) != 3*w || header != strings.HasPrefix(tt.name, "llm.c") {
			t.Errorf("%s: width %d, %d bytes, header %v, %v", tt.name, w, len(tok), header, err)
		}
	}
	if _, _, _, err := parseTokens(body, "f", 3); err == nil {
		t.Error("width 3 accepted")
	}
}
