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
       headroom viz --svg OUT.svg [--device D] [--detail K] FILE
       headroom viz --compare [--text] A B
       headroom viz --follow FILE [--log RUN.jsonl] [--addr 127.0.0.1:0]

Serves a page that shows a memory snapshot: the active memory over the
recorded history (stacked by category for headroom's snapshots, by
allocation for PyTorch's), the allocator's segments and blocks after any
event, and the largest allocations at the peak with their module paths.
FILE is headroom's snapshot (train --memory-snapshot, .json or .pickle) or
PyTorch's (torch.cuda.memory._dump_snapshot). The page is built into the
binary and loads nothing from elsewhere. Stop with Ctrl-C.

With --svg, nothing is served: the timeline (the page's, with its peak,
OOM markers and a legend of the bands at the peak) is written to OUT.svg
as a static image for reports and docs.

With --compare, two snapshots are compared (a plan against a run, from
plan --memory-snapshot and train --memory-snapshot, or two runs, before
and after a change): the differences at each one's peak, by category and
by tensor, are printed, and a page showing the two timelines overlaid and
the same tables is served (with --text, only printed).

With --follow (or --live), FILE is a snapshot another process is writing
(train --memory-snapshot FILE --memory-snapshot-every 10s): the page is
served as train --live serves it, and updates whenever the file is written
again (it is looked at twice a second; it need not exist yet). With --log,
the steps that run appends to its --log file (loss, throughput, each
step's peaks) are shown as they come, as train --live shows them.

Flags:
`)
		printFlags(fs.Output(), fs)
	}
	addr := fs.String("addr", "127.0.0.1:0", "address to listen on (port 0: any free port); without a host (:PORT) it is 127.0.0.1, which answers this machine only; name a host (0.0.0.0, an interface's address) to listen beyond it")
	svgOut := fs.String("svg", "", "write the timeline as a static SVG to this file instead of serving the page")
	dev := fs.Int("device", -1, "with --svg: the device to draw (-1: the first with memory)")
	compare := fs.Bool("compare", false, "compare two snapshot files, A (before, or the plan) and B (after, or the run)")
	textOnly := fs.Bool("text", false, "with --compare: print the differences and exit, serving nothing")
	follow := fs.Bool("follow", false, "serve FILE live: read it again whenever another process writes it (train --memory-snapshot-every)")
	fs.BoolVar(follow, "live", false, "the same as --follow")
	logPath := fs.String("log", "", "with --follow: also show the steps a run appends to this --log file")
	detail := fs.Int("detail", 0, fmt.Sprintf("with --svg: allocations with bands of their own, for a timeline stacked by allocation (1 to %d; default %d)", memviz.MaxDetail, memviz.MaxAllocationSeries))
	// The file may come before or after the flags.
	var files []string
	for rest := args; ; {
		if err := parseFlags(fs, rest); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		files = append(files, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if *compare {
		return vizCompare(ctx, files, *addr, *dev, *svgOut, *textOnly, out, ready)
	}
	if len(files) != 1 {
		fs.Usage()
		return fmt.Errorf("viz: want one snapshot file, got %d", len(files))
	}
	name := files[0]
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		name = name[i+1:]
	}
	if *logPath != "" && !*follow {
		return fmt.Errorf("viz: --log applies with --follow (the steps of the run writing the snapshot)")
	}
	if *follow {
		if *svgOut != "" {
			return fmt.Errorf("viz: --follow serves a page; --svg writes a file: give one")
		}
		return vizFollow(ctx, files[0], *logPath, name, *addr, out, ready)
	}
	if *svgOut != "" {
		return vizSVG(files[0], name, *svgOut, *dev, *detail, out)
	}
	network, listen, hosts, err := vizAddr(*addr)
	if err != nil {
		return err
	}
	snap, err := memviz.ReadFile(files[0])
	if err != nil {
		return err
	}
	ln, url, err := listenViewer(network, listen, "the snapshot", out)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "serving %s at %s (Ctrl-C to stop)\n", files[0], url)
	if ready != nil {
		ready <- url
	}
	return memviz.Serve(ctx, ln, memviz.NewServer(name, snap), hosts...)
}

// vizAddr turns --addr into the address to listen on and the host names
// requests may use besides localhost and IP addresses. Listening beyond
// loopback takes an explicit host: ":PORT" alone, which net.Listen would
// bind on every interface, means 127.0.0.1:PORT.
//
// An IPv4 address is listened on with tcp4, so that 0.0.0.0 means the IPv4
// interfaces, as written, and not also IPv6's (Go's "tcp" would bind [::]).
func vizAddr(addr string) (network, listen string, hosts []string, err error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", "", nil, fmt.Errorf("viz: --addr %q: %w", addr, err)
	}
	// The port is checked now, not after the snapshot is read.
	if _, err := net.LookupPort("tcp", port); err != nil {
		return "", "", nil, fmt.Errorf("viz: --addr %q: %w", addr, err)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	network = "tcp"
	if ip := net.ParseIP(host); ip == nil {
		// A name (this machine's, or localhost): requests naming it are
		// the user's own.
		hosts = []string{host}
	} else if ip.To4() != nil {
		network = "tcp4"
	}
	return network, net.JoinHostPort(host, port), hosts, nil
}

// vizSVG writes the timeline of file's device dev (-1: the first) as SVG.
func vizSVG(file, name, outPath string, dev, detail int, out io.Writer) error {
	snap, err := memviz.ReadFile(file)
	if err != nil {
		return err
	}
	if dev < 0 {
		dev = 0
		if ds := snap.Devices(); len(ds) > 0 {
			dev = ds[0]
		}
	}
	a, err := memviz.Analyze(snap, dev)
	if err != nil {
		return fmt.Errorf("viz: %w", err)
	}
	f, err := os.Create(outPath)
	if err != nil {
		return fmt.Errorf("viz: %w", err)
	}
	if err := a.SummaryDetail(name, detail).WriteSVG(f); err != nil {
		f.Close()
		return fmt.Errorf("viz: writing %s: %w", outPath, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("viz: %w", err)
	}
	fmt.Fprintf(out, "wrote the timeline of %s (device %d) to %s\n", file, dev, outPath)
	return nil
}

// listenViewer listens for a viewer page and returns the URL of the
// address actually bound (so what is printed is where the page can be
// reached), warning on out when that is beyond the loopback, since anyone
// who reaches it can read what is served (what).
func listenViewer(network, listen, what string, out io.Writer) (net.Listener, string, error) {
	ln, err := net.Listen(network, listen)
	if err != nil {
		return nil, "", fmt.Errorf("viz: %w", err)
	}
	bound := ln.Addr().(*net.TCPAddr)
	if !bound.IP.IsLoopback() {
		fmt.Fprintf(out, "warning: listening on %s, beyond this machine's loopback: anyone who can reach it can read %s\n", bound, what)
	}
	return ln, "http://" + bound.String() + "/", nil
}
