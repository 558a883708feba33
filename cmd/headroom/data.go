package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"github.com/headroom-ml/headroom/dataset"
	"github.com/headroom-ml/headroom/idx"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/zoo"
)

// batches is training data as a sequence of batches from a position
// (epoch, step): Next returns io.EOF at the end of each epoch and then
// goes on with the next.
type batches interface {
	Next(ctx context.Context) (x, y *tensor.Tensor, err error)
	NumBatches() int
	Close() error
}

// samplerBatches reads the batches of a sampler's order from a source:
// data held in memory (Fashion-MNIST) or generated.
type samplerBatches struct {
	s           dataset.Sampler
	src         source
	epoch, step int
	order       []int
}

func (b *samplerBatches) NumBatches() int { return b.s.NumBatches() }
func (b *samplerBatches) Close() error    { return nil }

func (b *samplerBatches) Next(ctx context.Context) (*tensor.Tensor, *tensor.Tensor, error) {
	if b.step >= b.s.NumBatches() {
		b.epoch, b.step, b.order = b.epoch+1, 0, nil
		return nil, nil, io.EOF
	}
	if b.order == nil {
		b.order = b.s.Order(b.epoch)
	}
	lo := b.step * b.s.BatchSize
	idx := b.order[lo:min(lo+b.s.BatchSize, len(b.order))]
	b.step++
	return b.src.Batch(idx)
}

// loaderBatches reads batches through the dataset loader, whose staging
// buffers come from the device allocator (category input): a batch's
// tensors are views of its staging buffer, valid until the next Next.
type loaderBatches struct {
	l     *dataset.Loader
	shape []int // one example's shape as the model takes it (nil: as loaded)
	steps int   // batches per epoch when the loader cannot say (a stream); -1: ask it
	skips *skips
	// noted is the loader's skipped count at the last skipNote.
	noted int64
}

// skipNote is the epoch line's count of the samples skipped under
// --skip-bad since the last call, with the first one's error; "" when none.
func (b *loaderBatches) skipNote() string {
	if b.skips == nil {
		return ""
	}
	n := b.l.Stats().Skipped
	if n == b.noted {
		return ""
	}
	k := n - b.noted
	b.noted = n
	return fmt.Sprintf(" skipped %d bad sample(s) (--skip-bad; %d in all, the first: %v),", k, n, b.skips.firstErr())
}

// skips records the errors of the samples skipped under --skip-bad.
type skips struct {
	mu    sync.Mutex
	first error
}

func newSkips(on bool) *skips {
	if !on {
		return nil
	}
	return new(skips)
}

// add records a skipped sample's error (called by the loader's workers,
// concurrently).
func (s *skips) add(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.first == nil {
		s.first = err
	}
}

func (s *skips) firstErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first
}

func (b *loaderBatches) NumBatches() int {
	if b.steps >= 0 {
		return b.steps
	}
	return b.l.NumBatches()
}
func (b *loaderBatches) Close() error { return b.l.Close() }

func (b *loaderBatches) Next(ctx context.Context) (*tensor.Tensor, *tensor.Tensor, error) {
	bt, err := b.l.Next(ctx)
	if err != nil {
		return nil, nil, err
	}
	return loaderTensors(bt.N, bt.Shape, b.shape, bt.X, bt.Tokens, bt.Y)
}

// loaderTensors makes tensors of a batch's inputs and targets, over the
// same memory.
func loaderTensors(n int, shape, want []int, xf []float32, xt []int64, y []int64) (*tensor.Tensor, *tensor.Tensor, error) {
	xs := append(tensor.Shape{n}, shape...)
	if want != nil {
		xs = append(tensor.Shape{n}, want...)
	}
	var x *tensor.Tensor
	if xt != nil {
		x = &tensor.Tensor{DType: tensor.Int64, Shape: xs, Data: bytesOf(xt)}
	} else {
		x = &tensor.Tensor{DType: tensor.Float32, Shape: xs, Data: bytesOf(xf)}
	}
	ys := tensor.Shape{n}
	if len(y) > n && n > 0 {
		ys = tensor.Shape{n, len(y) / n}
	}
	yt := &tensor.Tensor{DType: tensor.Int64, Shape: ys, Data: bytesOf(y)}
	if len(x.Data) != xs.NumElements()*x.DType.Size() {
		return nil, nil, fmt.Errorf("data: a batch of %d examples of shape %v does not make the model's input %v", n, shape, xs)
	}
	return x, yt, nil
}

func bytesOf[T float32 | int64](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(s[0])))
}

// mapData is a map source opened from --data, with the transforms that
// bring its examples to the model's input.
type mapData struct {
	src dataset.MapSource // nil for a stream
	// stream is WebDataset shards read as a stream (shards.go), of
	// samples records of at most maxRecord bytes (Shards.Scan).
	stream             *dataset.Shards
	samples, maxRecord int
	transforms         []dataset.Transform
	shape              []int  // the model's example shape when the source's differs (a CSV row)
	skips              *skips // under --skip-bad, what the loader skipped (nil: nothing is skipped)
	classes            int    // classes in the data (0: unknown)
	what               string
	// shuffle is a stream's shuffle buffer in records, when set (by
	// --shuffle-buffer or the budget); unset: the loader's default.
	shuffle optInt
}

// openData opens --data for a model of the zoo: a token file for the
// language models, else IDX files (a directory holding a pair, or the
// images file), an image folder (a directory) or a CSV/TSV table.
func openData(path string, spec zoo.Spec) (*mapData, error) {
	return openSplit(path, spec, "train", false)
}

// openTrainData is openData for train: with skipBad (--skip-bad) a bad
// sample (an image that does not decode, a table row with a bad cell, a
// shard cut short) is skipped and counted instead of stopping training.
func openTrainData(path string, spec zoo.Spec, skipBad bool) (*mapData, error) {
	return openSplit(path, spec, "train", skipBad)
}

// openSplit is openData for a split: in a directory of IDX files the pair
// of that split ("train", or "test" for a validation set) is preferred.
func openSplit(path string, spec zoo.Spec, split string, skipBad bool) (*mapData, error) {
	x, _ := spec.Example(1)
	if paths, ok, err := shardPaths(path); err != nil {
		return nil, err
	} else if ok {
		return openShards(paths, spec, skipBad)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if err := regularFile(path, fi); err != nil {
		return nil, err
	}
	if x.DType == tensor.Int64 {
		if fi.IsDir() {
			return nil, fmt.Errorf("%s is a directory; %s trains on a token file (flat uint16 tokens, as nanoGPT's train.bin)", path, spec.Name)
		}
		t, err := dataset.OpenTokens(path, dataset.TokenOptions{Context: x.Shape[1]})
		if err != nil {
			return nil, err
		}
		return &mapData{src: t, what: fmt.Sprintf("token file %s (%d tokens, windows of %d)", path, t.NumTokens(), x.Shape[1])}, nil
	}
	if len(x.Shape) != 4 {
		return nil, fmt.Errorf("%s takes inputs %v: no data source for them", spec.Name, x.Shape)
	}
	c, h, w := x.Shape[1], x.Shape[2], x.Shape[3]
	if images, labels, ok := findIDX(path, fi.IsDir(), split); ok {
		return openIDX(images, labels, spec)
	}
	if fi.IsDir() {
		f, err := dataset.OpenImageFolder(path, c)
		if err != nil {
			return nil, err
		}
		return &mapData{src: f, transforms: []dataset.Transform{dataset.Resize{Height: h, Width: w}}, classes: len(f.Classes), skips: newSkips(skipBad),
			what: fmt.Sprintf("image folder %s (%d images, %d classes, resized to %dx%d)", path, f.Len(), len(f.Classes), h, w)}, nil
	}
	ext := strings.ToLower(filepath.Ext(path))
	if ext != ".csv" && ext != ".tsv" {
		return nil, fmt.Errorf("%s: not an image folder (a directory), IDX files (NAME-images-idxN-ubyte[.gz] with NAME-labels-idx1-ubyte[.gz]) or a .csv/.tsv table", path)
	}
	opt := dataset.CSVOptions{}
	if ext == ".tsv" {
		opt.Comma = '\t'
	}
	t, err := dataset.ReadCSV(path, opt)
	var se *dataset.SampleError
	if errors.Is(err, dataset.ErrNotNumber) && errors.As(err, &se) && se.Row == 1 {
		// The first line may name the columns.
		opt.Header = true
		if t2, err2 := dataset.ReadCSV(path, opt); err2 == nil {
			t, err = t2, nil
		} else if skipBad {
			t, err = nil, err2
		}
	}
	if err != nil && skipBad && errors.As(err, &se) {
		// Bad rows are dropped when the table is read (the rows after a
		// header, if the first line is not numbers).
		opt.SkipBad = true
		t, err = dataset.ReadCSV(path, opt)
	}
	if err != nil {
		return nil, err
	}
	skipNote := ""
	if t.Skipped > 0 {
		skipNote = fmt.Sprintf("; %d bad row(s) skipped (--skip-bad)", t.Skipped)
	}
	if t.NumFeatures() != c*h*w {
		return nil, fmt.Errorf("%s: %d feature columns; %s takes %d (%dx%dx%d)", path, t.NumFeatures(), spec.Name, c*h*w, c, h, w)
	}
	maxLabel := int64(-1)
	for _, l := range t.Labels {
		maxLabel = max(maxLabel, l)
	}
	return &mapData{src: t, shape: []int{c, h, w}, classes: int(maxLabel + 1),
		what: fmt.Sprintf("table %s (%d rows, %d features, label column 0%s)", path, t.Len(), t.NumFeatures(), skipNote)}, nil
}

// regularFile refuses a data file that is not a regular file (a FIFO, a
// device): opening a FIFO waits for its writer, and the open cannot be
// interrupted, so the run would not hear Ctrl-C. A directory passes (an
// image folder, IDX files or shards, whose files are checked in turn).
func regularFile(path string, fi os.FileInfo) error {
	if fi.IsDir() || fi.Mode().IsRegular() {
		return nil
	}
	return fmt.Errorf("%s: %w (%v): data must be a regular file or a directory", path, dataset.ErrNotRegular, fi.Mode().Type())
}

// subset is samples [lo, hi) of a map source.
type subset struct {
	src    dataset.MapSource
	lo, hi int
}

func (s subset) Len() int                             { return s.hi - s.lo }
func (s subset) Get(i int, ex *dataset.Example) error { return s.src.Get(s.lo+i, ex) }

// ResidentBytes is the whole source's (dataset.Resident): what it holds
// does not shrink with the subset.
func (s subset) ResidentBytes() int64 {
	if r, ok := s.src.(dataset.Resident); ok {
		return r.ResidentBytes()
	}
	return 0
}

// SampleBound is the whole source's largest sample (dataset.Bounder), an
// upper bound for the subset's.
func (s subset) SampleBound() (dataset.SampleBound, error) {
	if b, ok := s.src.(dataset.Bounder); ok {
		return b.SampleBound()
	}
	return dataset.SampleBound{}, nil
}

// Batch reads samples idx of the map data for evaluation, on the Go heap
// (evaluation is not pipelined).
func (d *mapData) Batch(idx []int) (*tensor.Tensor, *tensor.Tensor, error) {
	var ex dataset.Example
	var scratch []float32
	var r dataset.Rand
	var xf []float32
	var xt, y []int64
	var shape []int
	for _, i := range idx {
		if err := d.src.Get(i, &ex); err != nil {
			return nil, nil, err
		}
		for _, t := range d.transforms {
			t.Apply(&r, &ex, &scratch)
		}
		if shape == nil {
			shape = append([]int(nil), ex.Shape...)
		}
		xf = append(xf, ex.X...)
		xt = append(xt, ex.Tokens...)
		y = append(y, ex.Y...)
	}
	if len(xt) == 0 {
		xt = nil
	}
	return loaderTensors(len(idx), shape, d.shape, xf, xt, y)
}

// hasFashionFiles reports whether dir holds Fashion-MNIST's IDX files
// (raw or gzipped): then cnn and mlp read it as before.
func hasFashionFiles(dir string) bool {
	for _, name := range []string{"train-images-idx3-ubyte", "train-images-idx3-ubyte.gz"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return true
		}
	}
	return false
}

// dataFlags defines train's flags of the data loader and validation set.
func dataFlags(fs *flag.FlagSet, f *trainFlags) {
	fs.StringVar(&f.val, "val", "", "a separate validation set, evaluated each epoch (validation loss and accuracy): an image folder, IDX files (a directory with a t10k/test/val pair, or the images file) or a .csv/.tsv table, shaped for the model as --data is")
	fs.BoolVar(&f.skipBad, "skip-bad", false, "skip and count bad samples of --data (an image that does not decode, a table row with a cell that is not a number, a tar shard cut short) instead of stopping with an error naming them")
	fs.IntVar(&f.prefetch, "prefetch", defaultPrefetch, "staging buffers of the --data loader (its prefetch depth: one held by the step, the others filled ahead); with --budget the most, lowered to fit (at least 1)")
	fs.Var(&f.shuffleBuf, "shuffle-buffer", shuffleBufferHelp)
}

// checkData checks the data flags before any work.
func (f *trainFlags) checkData() error {
	if f.prefetch == 0 && !f.given["prefetch"] {
		f.prefetch = defaultPrefetch
	}
	if f.val != "" {
		if f.valSplit > 0 {
			return fmt.Errorf("--val %s and --val-split %g: give one validation set", f.val, f.valSplit)
		}
		if _, err := os.Stat(f.val); err != nil {
			return fmt.Errorf("--val: %w", err)
		}
		if m := cmp.Or(f.model, "cnn"); !isFashion(m) {
			if x, _ := mustSpec(m).Example(1); x.DType != tensor.Float32 || len(x.Shape) != 4 {
				return fmt.Errorf("--val %s: %s does not take images or table rows (validation sets are for the classifiers)", f.val, m)
			}
		}
	}
	if f.prefetch < 1 {
		return fmt.Errorf("--prefetch %d: must be at least 1 (one staging buffer, nothing filled ahead)", f.prefetch)
	}
	return f.shuffleBuf.check()
}

// idxName matches the IDX files of MNIST's naming: the split (train,
// t10k, ...), images or labels, then idxN-ubyte, perhaps gzipped.
var idxName = regexp.MustCompile(`^(.*)-(images|labels)-idx(\d)-ubyte(\.gz)?$`)

// findIDX finds a pair of IDX files at path: in a directory the images and
// labels of one split, that named split first (for "test": t10k, test or
// val), else the only pair there; a file named NAME-images-idxN-ubyte with
// NAME-labels-idx1-ubyte beside it.
func findIDX(path string, dir bool, split string) (images, labels string, ok bool) {
	if !dir {
		m := idxName.FindStringSubmatch(filepath.Base(path))
		if m == nil || m[2] != "images" {
			return "", "", false
		}
		for _, gz := range []string{m[4], "", ".gz"} {
			l := filepath.Join(filepath.Dir(path), m[1]+"-labels-idx1-ubyte"+gz)
			if _, err := os.Stat(l); err == nil {
				return path, l, true
			}
		}
		return "", "", false
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return "", "", false
	}
	pairs := map[string][2]string{}
	var names []string
	for _, e := range entries {
		m := idxName.FindStringSubmatch(e.Name())
		if m == nil || e.IsDir() {
			continue
		}
		p := pairs[m[1]]
		if m[2] == "images" && p[0] == "" {
			p[0] = filepath.Join(path, e.Name())
		} else if m[2] == "labels" && p[1] == "" {
			p[1] = filepath.Join(path, e.Name())
		}
		if _, seen := pairs[m[1]]; !seen {
			names = append(names, m[1])
		}
		pairs[m[1]] = p
	}
	prefer := []string{"train"}
	if split == "test" {
		prefer = []string{"t10k", "test", "val"}
	}
	for _, n := range prefer {
		if p := pairs[n]; p[0] != "" && p[1] != "" {
			return p[0], p[1], true
		}
	}
	var complete [][2]string
	for _, n := range names {
		if p := pairs[n]; p[0] != "" && p[1] != "" {
			complete = append(complete, p)
		}
	}
	if len(complete) == 1 {
		return complete[0][0], complete[0][1], true
	}
	return "", "", false
}

// openIDX opens a pair of IDX files for a model taking [C H W] images: a
// sample with C*H*W values is reshaped to it; an image ([H W] or [C' H W])
// of the model's channels, or grey for an RGB model, is resized to H x W
// (grey repeated to 3 channels). Other shapes are an error naming both.
func openIDX(images, labels string, spec zoo.Spec) (*mapData, error) {
	x, _ := spec.Example(1)
	want := []int{x.Shape[1], x.Shape[2], x.Shape[3]}
	for _, p := range []string{images, labels} {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if err := regularFile(p, fi); err != nil {
			return nil, err
		}
	}
	si, err := idx.ReadFile(images)
	if err != nil {
		return nil, err
	}
	sl, err := idx.ReadFile(labels)
	if err != nil {
		return nil, err
	}
	src, err := dataset.NewIDX(si, sl)
	if err != nil {
		return nil, err
	}
	if src.Len() == 0 {
		return nil, fmt.Errorf("%s: no samples", images)
	}
	shape := si.Dims[1:]
	var ts []dataset.Transform
	what := fmt.Sprintf("IDX files %s, %s (%d samples of shape %v", images, labels, src.Len(), shape)
	img := shape
	if len(shape) == 2 {
		img = []int{1, shape[0], shape[1]}
	}
	switch {
	case slices.Equal(shape, want):
	case numElements(shape) == numElements(want):
		ts = []dataset.Transform{dataset.Reshape{Shape: want}}
		what += fmt.Sprintf(", as %v", want)
	case len(img) == 3 && (img[0] == want[0] || img[0] == 1 && want[0] == 3):
		if len(shape) == 2 {
			ts = append(ts, dataset.Reshape{Shape: img})
		}
		if img[0] != want[0] {
			ts = append(ts, dataset.RepeatChannels{N: want[0]})
			what += ", grey repeated to 3 channels"
		}
		ts = append(ts, dataset.Resize{Height: want[1], Width: want[2]})
		what += fmt.Sprintf(", resized to %dx%d", want[1], want[2])
	default:
		return nil, fmt.Errorf("%s: samples of shape %v, which neither hold the %d values of %s's input %v nor are images of %d channel(s) (or grey) to resize to it",
			images, shape, numElements(want), spec.Name, want, want[0])
	}
	lab, err := sl.Int64s()
	if err != nil {
		return nil, err
	}
	maxLabel := int64(-1)
	for _, l := range lab {
		maxLabel = max(maxLabel, l)
	}
	return &mapData{src: src, transforms: ts, classes: int(maxLabel + 1), what: what + ")"}, nil
}

func numElements(s []int) int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

// mustSpec is the zoo's model of a name already checked.
func mustSpec(name string) zoo.Spec {
	s, _ := zoo.Lookup(name)
	return s
}

// openVal opens --val for spec: evaluated as training data is read, with
// Fashion-MNIST's normalization when the training set is Fashion-MNIST
// (read outside the loader, normalized).
func openVal(path string, spec zoo.Spec, fashion bool, trainClasses int) (evalSet, string, error) {
	v, err := openSplit(path, spec, "test", false)
	if err != nil {
		return evalSet{}, "", fmt.Errorf("--val: %w", err)
	}
	if v.stream != nil {
		return evalSet{}, "", fmt.Errorf("--val %s: %w", path, errStreamEval)
	}
	if fashion {
		v.transforms = append(v.transforms, dataset.Normalize{Mean: []float32{dataset.TrainMean}, Std: []float32{dataset.TrainStd}})
	}
	if o, err := zoo.OutputMeta(spec, 1); err == nil && v.classes > o.Shape[len(o.Shape)-1] {
		return evalSet{}, "", fmt.Errorf("--val %s: %d classes, more than the %d outputs of %s", path, v.classes, o.Shape[len(o.Shape)-1], spec.Name)
	}
	if trainClasses > 0 && v.classes > trainClasses {
		return evalSet{}, "", fmt.Errorf("--val %s: labels up to %d, the training data's only up to %d", path, v.classes-1, trainClasses-1)
	}
	return evalSet{"val", v, 0, v.src.Len()}, v.what, nil
}
