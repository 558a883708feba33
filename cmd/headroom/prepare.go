package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image"
	_ "image/jpeg" // DecodeConfig checks JPEG headers
	_ "image/png"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/headroom-ml/headroom/dataset"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/internal/safefile"
)

// prepareFlags are prepare's flags.
type prepareFlags struct {
	text, images, out string
	valFraction       float64
	shardSize         string
	seed              uint64
	channels          int
}

func cmdPrepare(ctx context.Context, args []string) error {
	return prepareMain(ctx, args, os.Stdout, os.Stderr)
}

func prepareMain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f prepareFlags
	fs := flag.NewFlagSet("prepare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.text, "text", "", "a UTF-8 text file to turn into a token file of characters (nanoGPT's shakespeare_char: the vocabulary is the sorted distinct characters), for train --data with the gpt models")
	fs.StringVar(&f.images, "images", "", "an image folder (one subfolder per class) to turn into WebDataset tar shards (KEY.png or KEY.jpg with KEY.cls), in a shuffled order, the files' bytes unchanged")
	fs.StringVar(&f.out, "out", "", "--text: the token file to write (e.g. train.bin; the vocabulary goes to NAME.vocab.json beside it); --images: the directory for the shards (shard-000000.tar, ..., and classes.txt)")
	fs.Float64Var(&f.valFraction, "val-fraction", 0, "--text: write this fraction of the tokens, the end of the text, to a validation file beside --out (val.bin for train.bin, else NAME-val.bin)")
	fs.StringVar(&f.shardSize, "shard-size", "256MiB", "--images: start a new shard when one reaches this size")
	fs.Uint64Var(&f.seed, "seed", 1, "--images: seed of the shuffled order")
	fs.IntVar(&f.channels, "channels", 3, "--images: channels the images are checked to decode to (1 or 3)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: headroom prepare (--text FILE | --images DIR) --out PATH [flags]

Converts data into the formats the loader reads fastest: a text file into a
flat file of uint16 character tokens (nanoGPT's train.bin, memory-mapped by
train --data), an image folder into WebDataset tar shards read as a stream.
Every file is written atomically (a temporary file renamed into place), long
work prints its progress, and Ctrl-C stops it leaving no partial file.

Flags:
`)
		printFlags(fs.Output(), fs)
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("prepare: unexpected argument %q", fs.Arg(0))
	}
	switch {
	case (f.text == "") == (f.images == ""):
		return fmt.Errorf("prepare: give one of --text and --images (see: headroom prepare -h)")
	case f.out == "":
		return fmt.Errorf("prepare: --out is needed (where to write)")
	case !(f.valFraction >= 0 && f.valFraction < 1):
		return fmt.Errorf("prepare: --val-fraction %g: must be at least 0 and below 1", f.valFraction)
	case f.valFraction > 0 && f.text == "":
		return fmt.Errorf("prepare: --val-fraction applies to --text only")
	case f.channels != 1 && f.channels != 3:
		return fmt.Errorf("prepare: --channels %d: 1 or 3", f.channels)
	}
	if f.text != "" {
		return prepareText(ctx, f, stdout, stderr)
	}
	limit, err := device.ParseBytes(f.shardSize)
	if err != nil || limit <= 0 {
		return fmt.Errorf("prepare: --shard-size %q: a positive size (e.g. 256MiB)", f.shardSize)
	}
	return prepareImages(ctx, f, limit, stdout, stderr)
}

// prepareChunk is how much text is read at a time: the context is checked
// and progress shown between chunks.
const prepareChunk = 1 << 20

// forEachChunk calls fn with the text of path in chunks that end on whole
// UTF-8 characters, checking ctx between them.
func forEachChunk(ctx context.Context, path string, fn func(chunk []byte, done int64) error) error {
	fh, err := os.Open(path)
	if err != nil {
		return err
	}
	defer fh.Close()
	if fi, err := fh.Stat(); err != nil {
		return err
	} else if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", path)
	}
	buf := make([]byte, prepareChunk+utf8.UTFMax)
	var carry int
	var done int64
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, rerr := io.ReadFull(fh, buf[carry:carry+prepareChunk])
		n += carry
		end := n
		if rerr == nil {
			// Hold back a character cut at the end of the chunk.
			for k := 1; k < utf8.UTFMax && k <= end; k++ {
				if utf8.RuneStart(buf[end-k]) {
					if !utf8.FullRune(buf[end-k : end]) {
						end -= k
					}
					break
				}
			}
		}
		done += int64(end)
		if err := fn(buf[:end], done); err != nil {
			return err
		}
		carry = copy(buf, buf[end:n])
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			if carry > 0 {
				return fn(buf[:carry], done+int64(carry))
			}
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}

// valPath is the validation token file beside out.
func valPath(out string) string {
	if filepath.Base(out) == "train.bin" {
		return filepath.Join(filepath.Dir(out), "val.bin")
	}
	return strings.TrimSuffix(out, ".bin") + "-val.bin"
}

// prepareText writes the character tokens of f.text: a first pass finds
// the vocabulary and the number of characters, a second writes the tokens
// (uint16; uint32 with llm.c's header beyond 65536 characters).
func prepareText(ctx context.Context, f prepareFlags, stdout, stderr io.Writer) error {
	fi, err := os.Stat(f.text)
	if err != nil {
		return fmt.Errorf("prepare: --text: %w", err)
	}
	size := fi.Size()
	p := newProgress(stderr, progressFlags{}) // train's: a line in place on a terminal, plain lines in a log
	var line string
	seen := map[rune]bool{}
	var chars int64
	err = forEachChunk(ctx, f.text, func(chunk []byte, done int64) error {
		for off := 0; off < len(chunk); {
			r, w := utf8.DecodeRune(chunk[off:])
			if r == utf8.RuneError && w <= 1 {
				return fmt.Errorf("%s: byte %d: not UTF-8 text", f.text, done-int64(len(chunk))+int64(off))
			}
			seen[r] = true
			chars++
			off += w
		}
		line = fmt.Sprintf("prepare: vocabulary: %s of %s read", device.FormatBytes(done), device.FormatBytes(size))
		p.note(line)
		return nil
	})
	p.endNote(line)
	if err != nil {
		return fmt.Errorf("prepare: --text: %w", err)
	}
	if chars < 2 {
		return fmt.Errorf("prepare: --text %s: %d characters, too few to predict one from another", f.text, chars)
	}
	vocab := make([]rune, 0, len(seen))
	for r := range seen {
		vocab = append(vocab, r)
	}
	slices.Sort(vocab)
	stoi := make(map[rune]uint32, len(vocab))
	for i, r := range vocab {
		stoi[r] = uint32(i)
	}
	width := 2
	if len(vocab) > 1<<16 {
		width = 4
	}
	nTrain := chars - int64(float64(chars)*f.valFraction)
	type output struct {
		path string
		file *safefile.File
		w    *bufio.Writer
		n    int64
	}
	outs := []*output{{path: f.out}}
	if f.valFraction > 0 {
		outs = append(outs, &output{path: valPath(f.out)})
	}
	for _, o := range outs {
		if o.file, err = safefile.Create(o.path, 0o644); err != nil {
			return fmt.Errorf("prepare: --out: %w", err)
		}
		defer o.file.Abort() // nothing after Commit
		o.w = bufio.NewWriterSize(o.file, 1<<20)
		if width == 4 {
			// llm.c's header says the width; the count is filled in below.
			if _, err := o.w.Write(make([]byte, 256*4)); err != nil {
				return fmt.Errorf("prepare: %w", err)
			}
		}
	}
	var k int64
	tok := make([]byte, 4)
	err = forEachChunk(ctx, f.text, func(chunk []byte, done int64) error {
		for off := 0; off < len(chunk); {
			r, w := utf8.DecodeRune(chunk[off:])
			off += w
			o := outs[0]
			if k >= nTrain {
				o = outs[1]
			}
			k++
			if width == 2 {
				binary.LittleEndian.PutUint16(tok, uint16(stoi[r]))
			} else {
				binary.LittleEndian.PutUint32(tok, stoi[r])
			}
			if _, err := o.w.Write(tok[:width]); err != nil {
				return err
			}
			o.n++
		}
		line = fmt.Sprintf("prepare: tokens: %s of %s read, %d tokens written", device.FormatBytes(done), device.FormatBytes(size), k)
		p.note(line)
		return nil
	})
	p.endNote(line)
	if err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	for _, o := range outs {
		if err := o.w.Flush(); err != nil {
			return fmt.Errorf("prepare: %s: %w", o.path, err)
		}
		if width == 4 {
			var h [12]byte
			binary.LittleEndian.PutUint32(h[0:], 20240520) // llm.c's magic
			binary.LittleEndian.PutUint32(h[4:], 2)        // version 2: uint32 tokens
			binary.LittleEndian.PutUint32(h[8:], uint32(o.n))
			if _, err := o.file.WriteAt(h[:], 0); err != nil {
				return fmt.Errorf("prepare: %s: %w", o.path, err)
			}
		}
	}
	// The vocabulary first: a token file is only usable with it.
	meta := struct {
		VocabSize int      `json:"vocab_size"`
		Itos      []string `json:"itos"`
		Width     int      `json:"token_bytes"`
		Source    string   `json:"source"`
	}{len(vocab), make([]string, len(vocab)), width, f.text}
	for i, r := range vocab {
		meta.Itos[i] = string(r)
	}
	vocabPath := strings.TrimSuffix(f.out, ".bin") + ".vocab.json"
	js, _ := json.MarshalIndent(meta, "", " ")
	if err := safefile.WriteFile(vocabPath, append(js, '\n'), 0o644); err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	for _, o := range outs {
		if err := o.file.Commit(); err != nil {
			return fmt.Errorf("prepare: %w", err)
		}
		fmt.Fprintf(stdout, "wrote %s: %d tokens of %d bytes\n", o.path, o.n, width)
	}
	fmt.Fprintf(stdout, "wrote %s: a vocabulary of %d characters\n", vocabPath, len(vocab))
	return nil
}

// prepareImages writes the images of f.images as WebDataset shards in a
// shuffled order: each image's bytes unchanged as KEY.png or KEY.jpg, its
// class as KEY.cls, a new shard past limit bytes. Each image's header is
// checked to decode first, so that a file that is no image is found here,
// named, rather than in training.
func prepareImages(ctx context.Context, f prepareFlags, limit int64, stdout, stderr io.Writer) error {
	folder, err := dataset.OpenImageFolder(f.images, f.channels)
	if err != nil {
		return fmt.Errorf("prepare: --images: %w", err)
	}
	if err := os.MkdirAll(f.out, 0o755); err != nil {
		return fmt.Errorf("prepare: --out: %w", err)
	}
	n := folder.Len()
	order := dataset.Sampler{N: n, BatchSize: 1, Shuffle: true, Seed: f.seed}.Order(0)
	p := newProgress(stderr, progressFlags{}) // train's: a line in place on a terminal, plain lines in a log
	var line string
	var cur *safefile.File
	var bw *bufio.Writer
	var tw *tar.Writer
	var shardBytes, total int64
	defer func() {
		if cur != nil {
			cur.Abort()
		}
	}()
	finish := func() error {
		if cur == nil {
			return nil
		}
		if err := errors.Join(tw.Close(), bw.Flush()); err != nil {
			return err
		}
		err := cur.Commit()
		cur = nil
		return err
	}
	shardName := func(i int) string { return filepath.Join(f.out, fmt.Sprintf("shard-%06d.tar", i)) }
	var names []string
	mtime := time.Unix(0, 0) // reproducible shards
	for k, i := range order {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("prepare: interrupted after %d of %d images; %d complete shard(s) in %s: %w", k, n, max(len(names)-1, 0), f.out, err)
		}
		path := folder.Paths[i]
		data, err := readRegular(path)
		if err != nil {
			return fmt.Errorf("prepare: %w", err)
		}
		if _, _, err := image.DecodeConfig(bytes.NewReader(data)); err != nil {
			return fmt.Errorf("prepare: %s: not a PNG or JPEG image: %w", path, err)
		}
		ext := strings.ToLower(filepath.Ext(path))[1:]
		if ext == "jpeg" {
			ext = "jpg"
		}
		rec := int64(len(data)) + 3*512 + 512 // the members, their headers, padding
		if cur == nil || (shardBytes > 0 && shardBytes+rec > limit) {
			if err := finish(); err != nil {
				return fmt.Errorf("prepare: %w", err)
			}
			name := shardName(len(names))
			if cur, err = safefile.Create(name, 0o644); err != nil {
				return fmt.Errorf("prepare: %w", err)
			}
			names = append(names, name)
			bw = bufio.NewWriterSize(cur, 1<<20)
			tw, shardBytes = tar.NewWriter(bw), 0
		}
		key := fmt.Sprintf("%08d", k)
		cls := []byte(fmt.Sprint(folder.Labels[i]))
		for _, m := range []struct {
			name string
			data []byte
		}{{key + "." + ext, data}, {key + ".cls", cls}} {
			if err := tw.WriteHeader(&tar.Header{Name: m.name, Mode: 0o644, Size: int64(len(m.data)), ModTime: mtime, Format: tar.FormatUSTAR}); err != nil {
				return fmt.Errorf("prepare: %w", err)
			}
			if _, err := tw.Write(m.data); err != nil {
				return fmt.Errorf("prepare: %w", err)
			}
		}
		shardBytes += rec
		total += int64(len(data))
		line = fmt.Sprintf("prepare: %d/%d images, %d shard(s), %s", k+1, n, len(names), device.FormatBytes(total))
		p.note(line)
	}
	p.endNote(line)
	if err := finish(); err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	classes := strings.Join(folder.Classes, "\n") + "\n"
	if err := safefile.WriteFile(filepath.Join(f.out, "classes.txt"), []byte(classes), 0o644); err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	fmt.Fprintf(stdout, "wrote %d shard(s) to %s (%s..%s): %d images of %d classes, %s; class names in classes.txt\n",
		len(names), f.out, filepath.Base(names[0]), filepath.Base(names[len(names)-1]), n, len(folder.Classes), device.FormatBytes(total))
	return nil
}

// readRegular reads an image file: a regular file (a FIFO would block
// without a way to cancel) of at most a shard record's bound.
func readRegular(path string) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	// The loader refuses records (image, class and their tar headers)
	// beyond its bound: refuse them here.
	if most := int64(dataset.DefaultMaxRecordBytes - 4*512); fi.Size() > most {
		return nil, fmt.Errorf("%s: %s, more than a shard record holds (%s)", path, device.FormatBytes(fi.Size()), device.FormatBytes(most))
	}
	return io.ReadAll(fh)
}
