package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/headroom-ml/headroom/budget"
	"github.com/headroom-ml/headroom/dataset"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/zoo"
)

// errStreamEval says why shards cannot be a validation set: evaluation
// reads samples by index, a stream has none.
var errStreamEval = errors.New("WebDataset shards are read as a stream, in order; a validation set must be an image folder, IDX files or a table (samples read by index)")

// shardPaths resolves --data to WebDataset shards, if it names them: a
// glob (shards/shard-*.tar), a .tar file, or a directory holding .tar
// files (what headroom prepare --images writes). ok is false for other
// data.
func shardPaths(path string) (paths []string, ok bool, err error) {
	if strings.ContainsAny(path, "*?[") {
		if paths, err = filepath.Glob(path); err != nil {
			return nil, true, fmt.Errorf("%s: %w", path, err)
		}
		if len(paths) == 0 {
			return nil, true, fmt.Errorf("%s: no file matches", path)
		}
		return paths, true, nil // Glob sorts
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, false, nil // the caller's Stat names the error
	}
	if !fi.IsDir() {
		return []string{path}, strings.EqualFold(filepath.Ext(path), ".tar"), nil
	}
	paths, _ = filepath.Glob(filepath.Join(path, "*.tar"))
	return paths, len(paths) > 0, nil
}

// openShards opens shards for a model taking [C H W] images: decoded to C
// channels and resized to H x W, as an image folder is. The headers are
// read first (Shards.Scan): the sample count gives the epoch's batches,
// the largest record bounds the shuffle buffer's bytes in the plan.
func openShards(paths []string, spec zoo.Spec, skipBad bool) (*mapData, error) {
	x, _ := spec.Example(1)
	if x.DType != tensor.Float32 || len(x.Shape) != 4 {
		return nil, fmt.Errorf("%s: WebDataset shards of images; %s does not take images (%v)", paths[0], spec.Name, x.Shape)
	}
	c, h, w := x.Shape[1], x.Shape[2], x.Shape[3]
	// Under --skip-bad a shard cut short ends there (counted), in the
	// scan as in the stream, and a member that does not decode is skipped.
	src := &dataset.Shards{Paths: paths, Channels: c, ShuffleShards: true, SkipBad: skipBad}
	st, err := src.Scan(context.Background())
	if err != nil {
		return nil, err
	}
	src.MaxRecordBytes = st.MaxRecordBytes
	// The workers' scratch is planned for the largest image, not the
	// first the loader reads.
	src.Bound.Shape = st.Largest
	classes := 0
	// headroom prepare writes the class names beside the shards.
	if b, err := os.ReadFile(filepath.Join(filepath.Dir(paths[0]), "classes.txt")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.TrimSpace(l) != "" {
				classes++
			}
		}
	}
	what := fmt.Sprintf("WebDataset shards %s (%d shard(s), %d samples", paths[0], len(paths), st.Samples)
	if len(paths) > 1 {
		what = fmt.Sprintf("WebDataset shards %s..%s (%d shards, %d samples", paths[0], paths[len(paths)-1], len(paths), st.Samples)
	}
	if classes > 0 {
		what += fmt.Sprintf(", %d classes", classes)
	}
	what += fmt.Sprintf(", resized to %dx%d; a stream through a shuffle buffer)", h, w)
	if st.Cut > 0 {
		what += fmt.Sprintf("; %d shard(s) cut short, read up to the cut (--skip-bad)", st.Cut)
	}
	return &mapData{stream: src, samples: st.Samples, maxRecord: st.MaxRecordBytes, classes: classes, skips: newSkips(skipBad),
		transforms: []dataset.Transform{dataset.Resize{Height: h, Width: w}}, what: what}, nil
}

// len is the number of samples in the data.
func (d *mapData) len() int {
	if d.stream != nil {
		return d.samples
	}
	return d.src.Len()
}

// checkTrain checks train's flags that take part of the data against a
// stream, which is read whole and in order: --limit below its samples
// and --val-split have no samples to pick by index.
func (d *mapData) checkTrain(limit int, valSplit float64) error {
	if d.stream == nil {
		return nil
	}
	if limit > 0 && limit < d.samples {
		return fmt.Errorf("--limit %d: WebDataset shards are read whole, as a stream (write fewer shards, or give a glob of some of them)", limit)
	}
	if valSplit > 0 {
		return fmt.Errorf("--val-split %g: %w (give --val)", valSplit, errStreamEval)
	}
	return nil
}

// source is what the loader reads for training on the first n samples:
// a subset of a map source, or the whole stream.
func (d *mapData) source(n int) any {
	if d.stream != nil {
		return d.stream
	}
	return subset{d.src, 0, n}
}

// config is cfg for this data: a stream's shuffle buffer is planned at
// the largest record the shards hold, and the shard order is permuted
// per epoch with the loader's seed.
func (d *mapData) config(cfg dataset.Config) dataset.Config {
	cfg = d.shuffled(cfg)
	if d.stream != nil {
		cfg.MaxRecordBytes = d.maxRecord
		d.stream.Seed = cfg.Seed
	}
	if d.skips != nil {
		cfg.SkipBad, cfg.OnSkip = true, d.skips.add
		if d.stream != nil {
			d.stream.OnSkip = d.skips.add
		}
	}
	return cfg
}

// plan plans the loader over the first n samples (planLoader).
func (d *mapData) plan(n int, cfg dataset.Config) (loaderPlan, error) {
	return planLoader(d.source(n), d.config(cfg))
}

// newLoader makes the loader over the first n samples. A stream's epoch
// re-opens the shards; a Start mid-epoch replays the stream (read, not
// decoded) up to that batch.
func (d *mapData) newLoader(n int, cfg dataset.Config) (*dataset.Loader, error) {
	cfg = d.config(cfg)
	if d.stream != nil {
		return dataset.NewStreamLoader(d.stream, cfg)
	}
	return dataset.NewLoader(subset{d.src, 0, n}, cfg)
}

// batches is the training batches of loader l: a stream's loader does
// not know its epoch's length, the scan does.
func (d *mapData) batches(l *dataset.Loader, batch int) *loaderBatches {
	b := &loaderBatches{l: l, shape: d.shape, steps: -1, skips: d.skips}
	if d.stream != nil {
		b.steps = (d.samples + batch - 1) / batch
	}
	return b
}

const shuffleBufferHelp = "`N` records in the shuffle buffer of a WebDataset stream (--data shards): 0 for none (the records in stream order, the shards in their seeded order); the default is 8 x --batch-size, which --budget halves down to one batch to fit (a value given is kept). Refused for data read by index (an image folder, a table, IDX files, a token file), which is permuted whole each epoch"

// optInt is an int flag that knows whether it was given: for
// --shuffle-buffer, where 0 (no buffer) is not the default.
type optInt struct {
	n   int
	set bool
}

func (o *optInt) String() string {
	if o == nil || !o.set {
		return ""
	}
	return strconv.Itoa(o.n)
}

func (o *optInt) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return errors.New("not a whole number of records")
	}
	o.n, o.set = n, true
	return nil
}

// check validates --shuffle-buffer before any work.
func (o optInt) check() error {
	if o.set && o.n < 0 {
		return fmt.Errorf("--shuffle-buffer %d: must be 0 (no shuffle buffer) or more records", o.n)
	}
	return nil
}

// setShuffle applies --shuffle-buffer (o) to the data d (nil: not read
// through the loader): only a stream has a shuffle buffer.
func (d *mapData) setShuffle(o optInt) error {
	if !o.set {
		return nil
	}
	if d == nil || d.stream == nil {
		return fmt.Errorf("--shuffle-buffer %d: only WebDataset shards (a stream) have a shuffle buffer; other data is read by index and permuted whole each epoch", o.n)
	}
	d.shuffle = o
	return nil
}

// shuffled is cfg with d's shuffle buffer: a stream without one passes
// its records through in order (the loader's 0 would be its default).
func (d *mapData) shuffled(cfg dataset.Config) dataset.Config {
	if d.stream == nil || !d.shuffle.set {
		return cfg
	}
	if d.shuffle.n == 0 {
		cfg.Shuffle = false
	} else {
		cfg.ShuffleBuffer = d.shuffle.n
	}
	return cfg
}

// fitLoader is fitWithLoader over d's loader for batches of batch. A
// stream whose shuffle buffer was not given keeps the largest that fits
// with the step, from the default 8 batches halved down to one batch,
// and the deepest prefetch at that buffer: the buffer is lowered only
// when depth 1 does not fit, since it changes the order of the samples
// where the depth changes only the speed. It says on w when it lowered
// the buffer and leaves d's buffer at the one chosen.
func (d *mapData) fitLoader(ctx context.Context, w io.Writer, prob budget.Problem, plan func(depth int) (loaderPlan, error), maxDepth, batch int) (*budget.Result, loaderPlan, error) {
	if d.stream == nil || d.shuffle.set {
		res, lp, err := fitWithLoader(ctx, prob, plan, maxDepth)
		var small *LoaderTooSmallError
		if errors.As(err, &small) && d.stream != nil {
			small.Shuffle = d.shuffle.n
		}
		return res, lp, err
	}
	var err error
	from := 8 * batch // the loader's default
	for s := from; ; s /= 2 {
		s = max(s, batch)
		d.shuffle = optInt{s, true}
		res, lp, e := fitWithLoader(ctx, prob, plan, maxDepth)
		var small *LoaderTooSmallError
		if !errors.As(e, &small) {
			if e == nil && s < from {
				fmt.Fprintf(w, "data loader: shuffle buffer lowered from %d to %d records to fit the budget\n", from, s)
			}
			return res, lp, e
		}
		small.Shuffle, err = s, e
		if s == batch {
			break
		}
	}
	d.shuffle = optInt{}
	return nil, loaderPlan{}, err // at the least buffer: its smallest budget
}
