package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"

	"github.com/headroom-ml/headroom/memviz"
)

func cmdViz(ctx context.Context, args []string) error {
	return viz(ctx, args, os.Stdout, nil)
}

// viz serves the viewer until ctx is done; ready, if not nil, receives the
// URL once the server listens (for tests).
func viz(ctx context.Context, args []string, out io.Writer, ready chan<- string) error {
	fs := flag.NewFlagSet("viz", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: headroom viz FILE [--addr 127.0.0.1:0]

Serves a page that shows a memory snapshot: the active memory over the
recorded history (stacked by category for headroom's snapshots, by
allocation for PyTorch's), the allocator's segments and blocks after any
event, and the largest allocations at the peak with their module paths.
FILE is headroom's snapshot (train --memory-snapshot, .json or .pickle) or
PyTorch's (torch.cuda.memory._dump_snapshot). The page is built into the
binary and loads nothing from elsewhere. Stop with Ctrl-C.

Flags:
`)
		fs.PrintDefaults()
	}
	addr := fs.String("addr", "127.0.0.1:0", "address to listen on (port 0: any free port); the default answers this machine only")
	// The file may come before or after the flags.
	var files []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		files = append(files, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if len(files) != 1 {
		fs.Usage()
		return fmt.Errorf("viz: want one snapshot file, got %d", len(files))
	}
	snap, err := memviz.ReadFile(files[0])
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("viz: %w", err)
	}
	url := "http://" + ln.Addr().String() + "/"
	if host, port, err := net.SplitHostPort(ln.Addr().String()); err == nil && (host == "::" || host == "0.0.0.0") {
		url = "http://localhost:" + port + "/"
	}
	fmt.Fprintf(out, "serving %s at %s (Ctrl-C to stop)\n", files[0], url)
	if ready != nil {
		ready <- url
	}
	name := files[0]
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		name = name[i+1:]
	}
	return memviz.Serve(ctx, ln, memviz.NewServer(name, snap))
}
