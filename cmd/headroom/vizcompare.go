package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/headroom-ml/headroom/memviz"
)

// vizCompare is viz --compare A B: the differences printed, then served
// (unless textOnly).
func vizCompare(ctx context.Context, files []string, addr string, dev int, svgOut string, textOnly bool, out io.Writer, ready chan<- string) error {
	if len(files) != 2 {
		return fmt.Errorf("viz --compare: want two snapshot files, A and B, got %d", len(files))
	}
	if svgOut != "" {
		return fmt.Errorf("viz --compare: --svg draws one snapshot's timeline; compare without it")
	}
	network, listen, hosts, err := vizAddr(addr)
	if err != nil {
		return err
	}
	var names [2]string
	var as [2]*memviz.Analysis
	for i, f := range files {
		s, err := memviz.ReadFile(f)
		if err != nil {
			return err
		}
		d := dev
		if d < 0 {
			d = 0
			if ds := s.Devices(); len(ds) > 0 {
				d = ds[0]
			}
		}
		if as[i], err = memviz.Analyze(s, d); err != nil {
			return fmt.Errorf("viz: %s: %w", f, err)
		}
		names[i] = f
		if j := strings.LastIndexAny(f, `/\`); j >= 0 {
			names[i] = f[j+1:]
		}
	}
	c := memviz.Compare(names[0], as[0], names[1], as[1])
	if err := c.WriteText(out, 20); err != nil {
		return err
	}
	if textOnly {
		return nil
	}
	ln, url, err := listenViewer(network, listen, "the snapshots", out)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "serving the comparison of %s and %s at %s (Ctrl-C to stop)\n", files[0], files[1], url)
	if ready != nil {
		ready <- url
	}
	return memviz.Serve(ctx, ln, memviz.NewCompareServer(c), hosts...)
}
