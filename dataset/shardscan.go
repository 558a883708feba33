package dataset

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"image"
	"io"
	"os"
)

// ErrNotRegular is a shard that is not a regular file (a FIFO, a device).
var ErrNotRegular = errors.New("not a regular file")

// ShardStats is what a pass over the shards' tar headers finds, without
// reading the members' data.
type ShardStats struct {
	// Samples is the number of records (runs of members sharing a key).
	Samples int
	// MaxRecordBytes bounds what one Record holds once it has read any of
	// the samples: the sum, over a record's member positions, of the
	// largest member at that position (a Record keeps each position's
	// buffer for reuse, so this, not the largest record, is the bound).
	MaxRecordBytes int
	// Largest is the decoded shape ([C H W], C the shards' channels) of
	// the image with the most pixels, read from the image members'
	// headers; nil when none decodes.
	Largest []int
	// Cut counts shards cut inside a header, ended there under
	// Shards.SkipBad (Samples counts their records before the cut).
	Cut int
}

// Scan reads the shards' tar headers, front to back, to count the samples
// and bound a record's bytes: a trainer needs both before the stream runs
// (the epoch's batches, and the shuffle buffer's memory). A regular file's
// reader seeks past the members' data, so this costs one read of the
// headers.
func (s *Shards) Scan(ctx context.Context) (ShardStats, error) {
	var st ShardStats
	var most []int // largest member per position in a record
	var pixels int64
	for _, p := range s.Paths {
		// Regular files only: opening a FIFO would wait for its writer
		// before any training starts, and Scan's reads cannot be
		// interrupted as the stream's can.
		if fi, err := os.Stat(p); err != nil {
			return ShardStats{}, fmt.Errorf("dataset: %w", err)
		} else if !fi.Mode().IsRegular() {
			return ShardStats{}, &SampleError{File: p, Offset: -1, Index: -1, Err: ErrNotRegular}
		}
		f, err := os.Open(p)
		if err != nil {
			return ShardStats{}, fmt.Errorf("dataset: %w", err)
		}
		tr := tar.NewReader(f)
		key, pos := "", 0
		for {
			if err := ctx.Err(); err != nil {
				f.Close()
				return ShardStats{}, err
			}
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				cut := errors.Is(err, io.ErrUnexpectedEOF)
				if cut {
					err = fmt.Errorf("%w: shard ends inside a header", ErrTruncated)
				}
				if cut && s.SkipBad {
					// The stream ends this shard there too.
					st.Cut++
					break
				}
				f.Close()
				return ShardStats{}, &SampleError{File: p, Member: key, Offset: -1, Index: -1, Err: err}
			}
			if h.Typeflag != tar.TypeReg {
				continue
			}
			k, _ := splitKey(h.Name)
			if pos == 0 || k != key {
				st.Samples++
				key, pos = k, 0
			}
			if pos == len(most) {
				most = append(most, 0)
			}
			most[pos] = max(most[pos], int(h.Size))
			pos++
			if _, ext := splitKey(h.Name); ext == "png" || ext == "jpg" || ext == "jpeg" {
				// The image's header only: the reader seeks past the
				// rest. A header that does not decode is Decode's error.
				if cfg, _, err := image.DecodeConfig(bufio.NewReaderSize(io.LimitReader(tr, 64<<10), 4096)); err == nil {
					if px := int64(cfg.Width) * int64(cfg.Height); px > pixels && px <= MaxImagePixels {
						pixels = px
						st.Largest = []int{s.channels(), cfg.Height, cfg.Width}
					}
				}
			}
		}
		f.Close()
	}
	for _, n := range most {
		st.MaxRecordBytes += n
	}
	return st, nil
}
