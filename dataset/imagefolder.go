package dataset

import (
	"bufio"
	"errors"
	"fmt"
	"image"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// ImageFolder is a map-style source over a directory with one subdirectory
// per class, as torchvision's ImageFolder reads it: classes are the
// subdirectory names in sorted order (class i is Classes[i]), and the
// samples are the PNG and JPEG files under each, recursively, in sorted path
// order. Samples decode to float32 CHW in [0,1] with Channels channels.
//
// Unlike torchvision, folders whose names start with a dot (such as
// .ipynb_checkpoints) are not classes, symbolic links to folders are not
// followed, and only PNG and JPEG files are images.
//
// Only the list of paths is held in memory; each Get reads and decodes one
// file.
type ImageFolder struct {
	Root     string
	Classes  []string
	Paths    []string // sample i's file
	Labels   []int    // sample i's class
	Channels int      // 1 or 3

	boundOnce sync.Once
	bound     SampleBound
}

// imageExts are the file extensions ImageFolder takes as images.
var imageExts = map[string]bool{".png": true, ".jpg": true, ".jpeg": true}

// ErrEmptyClass is wrapped by the error for a class folder holding no images.
var ErrEmptyClass = errors.New("class folder holds no images")

// OpenImageFolder lists root. channels is 1 or 3. A class folder without
// images is an error (torchvision raises one too), as is a root without
// class folders.
func OpenImageFolder(root string, channels int) (*ImageFolder, error) {
	if channels != 1 && channels != 3 {
		return nil, fmt.Errorf("dataset: image folder %s: %d channels, want 1 or 3", root, channels)
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("dataset: image folder: %w", err)
	}
	f := &ImageFolder{Root: root, Channels: channels}
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			f.Classes = append(f.Classes, e.Name())
		}
	}
	slices.Sort(f.Classes)
	if len(f.Classes) == 0 {
		return nil, fmt.Errorf("dataset: image folder %s has no class subfolders", root)
	}
	for c, name := range f.Classes {
		n := len(f.Paths)
		dir := filepath.Join(root, name)
		err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			// Regular files only: reading a FIFO named x.png would block
			// a worker where cancellation cannot reach it.
			if d.Type().IsRegular() && imageExts[strings.ToLower(filepath.Ext(path))] {
				f.Paths = append(f.Paths, path)
				f.Labels = append(f.Labels, c)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("dataset: image folder: %w", err)
		}
		if len(f.Paths) == n {
			return nil, fmt.Errorf("dataset: image folder %s: class %q: %w", root, name, ErrEmptyClass)
		}
		// torchvision's order: directories sorted as strings, then the
		// files of each sorted (sorted(os.walk(...)) and sorted(fnames)),
		// which differs from sorting whole paths once folders nest.
		slices.SortFunc(f.Paths[n:], func(a, b string) int {
			if c := strings.Compare(filepath.Dir(a), filepath.Dir(b)); c != 0 {
				return c
			}
			return strings.Compare(filepath.Base(a), filepath.Base(b))
		})
	}
	return f, nil
}

// Len is the number of images.
func (f *ImageFolder) Len() int { return len(f.Paths) }

// Get reads and decodes image i.
func (f *ImageFolder) Get(i int, ex *Example) error {
	data, err := readInto(f.Paths[i], ex.raw)
	if err != nil {
		return err
	}
	ex.raw = data
	x, h, w, err := DecodeImage(data, f.Paths[i], f.Channels, ex.X)
	if err != nil {
		var se *SampleError
		if errors.As(err, &se) {
			se.Index = i
		}
		return err
	}
	ex.X = x
	ex.setShape(f.Channels, h, w)
	ex.Y = append(ex.Y[:0], int64(f.Labels[i]))
	ex.Tokens = ex.Tokens[:0]
	return nil
}

// Name is image i's path.
func (f *ImageFolder) Name(i int) string { return f.Paths[i] }

// readInto reads a whole file into buf's storage (grown if short), so that
// a worker reading many files reuses one buffer.
func readInto(path string, buf []byte) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return buf, fmt.Errorf("dataset: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return buf, fmt.Errorf("dataset: %w", err)
	}
	buf = grow(buf, int(st.Size()))
	if _, err := io.ReadFull(f, buf); err != nil {
		return buf, fmt.Errorf("dataset: %s: %w", path, err)
	}
	return buf, nil
}

// SampleBound reads every image's header (its first bytes, not the pixels)
// for the largest image and the largest file (Bounder): a folder of mixed
// sizes is planned for its largest image, not for the first. Done once;
// a file whose header does not decode is left to Get to report.
func (f *ImageFolder) SampleBound() (SampleBound, error) {
	f.boundOnce.Do(func() {
		most := int64(0)
		for _, p := range f.Paths {
			// Get reads the whole file before decoding it, bad or not.
			h, w, size, err := imageHeader(p)
			f.bound.Bytes = max(f.bound.Bytes, size)
			if err != nil {
				continue
			}
			if px := int64(h) * int64(w); px > most && px <= MaxImagePixels {
				most = px
				f.bound.Shape = []int{f.Channels, h, w}
			}
		}
	})
	return f.bound, nil
}

// imageHeader reads an image file's dimensions from its header, and its
// size.
func imageHeader(path string) (h, w int, size int64, err error) {
	file, err := os.Open(path)
	if err != nil {
		return 0, 0, 0, err
	}
	defer file.Close()
	st, err := file.Stat()
	if err != nil {
		return 0, 0, 0, err
	}
	cfg, _, err := image.DecodeConfig(bufio.NewReaderSize(file, 4096))
	if err != nil {
		return 0, 0, st.Size(), err
	}
	return cfg.Height, cfg.Width, st.Size(), nil
}
