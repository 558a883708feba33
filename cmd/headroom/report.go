package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/headroom-ml/headroom/internal/runreport"
	"github.com/headroom-ml/headroom/internal/safefile"
)

func cmdReport(_ context.Context, args []string) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	out := fs.String("out", "", "the HTML file to write (default: the first log's name with .html)")
	title := fs.String("title", "", "the page's title (default: the logs' names)")
	svgDir := fs.String("svg", "", "also write each chart as a standalone SVG file into this directory (for documents)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: headroom report [flags] RUN.jsonl [OTHER.jsonl]

Renders the per-step log of a run (headroom train --log RUN.jsonl), or two
runs compared, as one self-contained HTML page: what ran, final and best
losses and accuracies, throughput, the memory plan, and SVG charts of the
loss with validation and test points, accuracy, evaluation metrics (a
super-resolution run's PSNR), learning rate, throughput,
and each step's measured peak memory by category against the planned peak.
The page loads nothing (no scripts, no styles from elsewhere).

Flags:
`)
		printFlags(fs.Output(), fs)
	}
	// Flags may come after the logs too (the flag package stops at the
	// first argument that is not one).
	var logs []string
	for rest := args; ; {
		if err := parseFlags(fs, rest); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		logs, rest = append(logs, fs.Arg(0)), fs.Args()[1:]
	}
	if len(logs) < 1 || len(logs) > 2 {
		return fmt.Errorf("report: give one or two logs (headroom train --log FILE), not %d (see: headroom report -h)", len(logs))
	}
	var runs []*runreport.Run
	for _, path := range logs {
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("report: %w", err)
		}
		name := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
		r, err := runreport.Parse(name, f)
		f.Close()
		if err != nil {
			return fmt.Errorf("report: %s: %w", path, err)
		}
		runs = append(runs, r)
	}
	if len(runs) == 2 && runs[0].Name == runs[1].Name {
		runs[0].Name, runs[1].Name = logs[0], logs[1]
	}
	path := *out
	if path == "" {
		path = strings.TrimSuffix(logs[0], filepath.Ext(logs[0])) + ".html"
	}
	var page bytes.Buffer
	if err := runreport.WriteHTML(&page, runs, runreport.Options{Title: *title}); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := safefile.WriteFile(path, page.Bytes(), 0o644); err != nil {
		return fmt.Errorf("report: --out: %w", err)
	}
	fmt.Printf("wrote %s (%d steps", path, len(runs[0].Steps))
	if len(runs) == 2 {
		fmt.Printf(" and %d", len(runs[1].Steps))
	}
	fmt.Println(")")
	if *svgDir != "" {
		if err := os.MkdirAll(*svgDir, 0o755); err != nil {
			return fmt.Errorf("report: --svg: %w", err)
		}
		for i, c := range runreport.Charts(runs) {
			name := filepath.Join(*svgDir, fmt.Sprintf("%02d-%s.svg", i+1, slug(c.Title)))
			if err := safefile.WriteFile(name, []byte(c.SVG()+"\n"), 0o644); err != nil {
				return fmt.Errorf("report: --svg: %w", err)
			}
			fmt.Println("wrote", name)
		}
	}
	return nil
}

// slug is a file name made of a title's letters and digits.
func slug(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.Trim(b.String(), "-")
}
