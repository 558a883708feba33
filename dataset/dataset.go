// Package dataset loads training data into host memory: currently
// Fashion-MNIST, from the IDX files of the Debian package
// dataset-fashion-mnist or from a subset embedded in the binary.
//
// Images stay as bytes (47 MB for all 60,000 training images rather than
// 188 MB as float32); Batch converts just the examples of one step into the
// float32 NCHW layout a model consumes, so input staging is one batch, sized
// and owned by the caller.
package dataset

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/headroom-ml/headroom/idx"
)

// Image geometry and classes of Fashion-MNIST.
const (
	Rows       = 28
	Cols       = 28
	Pixels     = Rows * Cols
	NumClasses = 10
)

// Classes names the labels 0..9, in the order of the dataset's documentation.
var Classes = [NumClasses]string{
	"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
	"Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
}

// The split names accepted by Load and FashionMNIST.
const (
	Train = "train"
	Test  = "test"
)

// filePrefix maps a split to the prefix its files carry in the original
// distribution (and in Debian's package): the test split is "t10k".
var filePrefix = map[string]string{Train: "train", Test: "t10k"}

// Dataset is one split of Fashion-MNIST in host memory.
type Dataset struct {
	// Split is Train or Test.
	Split string
	// Source says where the data came from: a directory, or Embedded.
	Source string
	// Images holds Len() images of Rows x Cols bytes, row-major, each pixel
	// 0 (background) to 255, image i at Images[i*Pixels:(i+1)*Pixels].
	Images []uint8
	// Labels holds the class (0..NumClasses-1) of each image.
	Labels []uint8
}

// Len is the number of examples.
func (d *Dataset) Len() int { return len(d.Labels) }

// Image returns the pixels of example i (a view, not a copy).
func (d *Dataset) Image(i int) []uint8 { return d.Images[i*Pixels : (i+1)*Pixels] }

// ClassCounts returns how many examples each class has.
func (d *Dataset) ClassCounts() [NumClasses]int {
	var c [NumClasses]int
	for _, l := range d.Labels {
		c[l]++
	}
	return c
}

// ErrEmpty is matched by errors.Is when a split holds no examples: nothing
// can be trained or scored on it.
var ErrEmpty = errors.New("no examples")

// FashionMNIST loads a split ("train" or "test") from dir, which holds the
// files under their original names (train-images-idx3-ubyte and so on), each
// either gzip-compressed with a .gz suffix or not.
func FashionMNIST(dir, split string) (*Dataset, error) {
	return FashionMNISTContext(context.Background(), dir, split)
}

// FashionMNISTContext is FashionMNIST, abandoned when ctx is done (see
// LoadContext).
func FashionMNISTContext(ctx context.Context, dir, split string) (*Dataset, error) {
	return LoadContext(ctx, os.DirFS(dir), dir, split)
}

// Load loads a split ("train" or "test") from the root of fsys, as
// FashionMNIST does from a directory. source names fsys in errors and in
// Dataset.Source (a directory path, or Embedded).
func Load(fsys fs.FS, source, split string) (*Dataset, error) {
	return LoadContext(context.Background(), fsys, source, split)
}

// LoadContext is Load, abandoned when ctx is done: it then returns an error
// wrapping ctx's cause at once, even when a file blocks (a FIFO with no
// writer, a stalled network file system). A read in progress is ended by
// closing the file; an open(2) that blocks cannot be, so its goroutine is
// left to finish (or to end with the process).
func LoadContext(ctx context.Context, fsys fs.FS, source, split string) (*Dataset, error) {
	prefix, ok := filePrefix[split]
	if !ok {
		return nil, fmt.Errorf("dataset: unknown split %q (want %q or %q)", split, Train, Test)
	}
	imgName, err := find(fsys, source, prefix+"-images-idx3-ubyte")
	if err != nil {
		return nil, err
	}
	lblName, err := find(fsys, source, prefix+"-labels-idx1-ubyte")
	if err != nil {
		return nil, err
	}
	images, err := decode(ctx, fsys, source, imgName)
	if err != nil {
		return nil, err
	}
	labels, err := decode(ctx, fsys, source, lblName)
	if err != nil {
		return nil, err
	}

	if images.Type != idx.Uint8 || len(images.Dims) != 3 || images.Dims[1] != Rows || images.Dims[2] != Cols {
		return nil, fmt.Errorf("dataset: %s: images are %v %v, want ubyte [n %d %d]", images.Name, images.Type, images.Dims, Rows, Cols)
	}
	if labels.Type != idx.Uint8 || len(labels.Dims) != 1 {
		return nil, fmt.Errorf("dataset: %s: labels are %v %v, want ubyte [n]", labels.Name, labels.Type, labels.Dims)
	}
	if images.Dims[0] != labels.Dims[0] {
		return nil, fmt.Errorf("dataset: %s holds %d images but %s holds %d labels", images.Name, images.Dims[0], labels.Name, labels.Dims[0])
	}
	if images.Dims[0] == 0 {
		return nil, fmt.Errorf("dataset: %s and %s hold 0 images: %w", images.Name, labels.Name, ErrEmpty)
	}
	for i, l := range labels.Data {
		if l >= NumClasses {
			// The header is 8 bytes (magic and one dimension).
			return nil, fmt.Errorf("dataset: %s: label %d of example %d (offset %d) is outside 0..%d", labels.Name, l, i, 8+i, NumClasses-1)
		}
	}
	return &Dataset{Split: split, Source: source, Images: images.Data, Labels: labels.Data}, nil
}

// find returns the name under which base exists in fsys: as is, or with a
// .gz suffix.
func find(fsys fs.FS, source, base string) (string, error) {
	for _, name := range []string{base, base + ".gz"} {
		_, err := fs.Stat(fsys, name)
		if err == nil {
			return name, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("dataset: %w", err)
		}
	}
	return "", fmt.Errorf("dataset: neither %s nor %s.gz found in %s: %w", base, base, source, fs.ErrNotExist)
}

// decode opens and decodes one IDX file, giving up when ctx is done (see
// LoadContext).
func decode(ctx context.Context, fsys fs.FS, source, name string) (*idx.File, error) {
	path := filepath.Join(source, name) // idx errors name the file the user can look at
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("dataset: %s: %w", path, context.Cause(ctx))
	}
	type result struct {
		f   *idx.File
		err error
	}
	done := make(chan result, 1)
	var (
		mu        sync.Mutex
		open      fs.File // closed on cancellation, to end a blocked read
		abandoned bool
	)
	go func() {
		f, err := fsys.Open(name)
		if err != nil {
			done <- result{nil, fmt.Errorf("dataset: %w", err)}
			return
		}
		mu.Lock()
		if abandoned {
			mu.Unlock()
			f.Close()
			return
		}
		open = f
		mu.Unlock()
		r, err := idx.Decode(f, path)
		mu.Lock()
		if !abandoned {
			f.Close()
		}
		mu.Unlock()
		done <- result{r, err}
	}()
	select {
	case r := <-done:
		return r.f, r.err
	case <-ctx.Done():
		mu.Lock()
		abandoned = true
		if open != nil {
			open.Close()
		}
		mu.Unlock()
		return nil, fmt.Errorf("dataset: %s: %w", path, context.Cause(ctx))
	}
}
