package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

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
