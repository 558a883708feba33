package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"

	"github.com/headroom-ml/headroom/internal/bench"
	"github.com/headroom-ml/headroom/internal/gemm"
)

const benchUsage = `Usage: headroom bench [flags]

Runs headroom's standard performance workloads and prints, for each, the
training step time (median, with the minimum and maximum in brackets),
the throughput and the training memory. All use Adam and float32:

%s
Each workload runs in a fresh child process (this binary, re-executed), so
that its memory is measured from a clean start: training memory is the peak
resident memory (VmHWM) minus the resident memory just before the first
step, when the parameters and the input batch exist but no gradient,
optimizer state or activation does (PyTorch creates those during its first
step). "planned" is what headroom's memory plan predicts for the same bytes.
The first --warmup steps are not timed (headroom compiles its step in the
first one).

With --compare-pytorch the same workloads also run in PyTorch (%s,
with Debian's python3-torch), in a child process of their own, alternating
with headroom round by round, with the same thread count, and the table
gives the ratios headroom/PyTorch (below 1 is better for headroom).

Examples:
  headroom bench --threads 2 --compare-pytorch
  headroom bench --workloads mlp,gpt --steps 10 --rounds 2 --compare-pytorch
  headroom bench --workloads resnet18 --op-profile --cpuprofile cpu.pprof

Flags:
`

type benchFlags struct {
	workloads  string
	steps      int
	warmup     int
	threads    int
	rounds     int
	seed       uint64
	compare    bool
	python     string
	script     string
	markdown   bool
	cpuprofile string
	opProfile  bool
	child      string
}

func cmdBench(ctx context.Context, args []string) error {
	var f benchFlags
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var list strings.Builder
	for _, w := range bench.Standard() {
		fmt.Fprintf(&list, "  %-10s %s\n", w.Name, w.Description)
	}
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), benchUsage, list.String(), bench.ScriptPath)
		fs.VisitAll(func(fl *flag.Flag) {
			if strings.HasPrefix(fl.Usage, "(internal)") {
				return
			}
			name, usage := flag.UnquoteUsage(fl)
			if name != "" {
				name = " " + name
			}
			fmt.Fprintf(fs.Output(), "  --%s%s\n    \t%s", fl.Name, name, usage)
			if fl.DefValue != "" && fl.DefValue != "0" && fl.DefValue != "false" {
				fmt.Fprintf(fs.Output(), " (default %s)", fl.DefValue)
			}
			fmt.Fprintln(fs.Output())
		})
	}
	fs.StringVar(&f.workloads, "workloads", "all", "comma-separated `list` of workloads to run: "+strings.Join(bench.Names(), ", ")+", or all")
	fs.IntVar(&f.steps, "steps", 7, "timed steps per workload and round (the issue's comparison asks for at least 5)")
	fs.IntVar(&f.warmup, "warmup", 2, "untimed steps before the timed ones")
	fs.IntVar(&f.threads, "threads", 0, "worker threads, for both engines (default $HEADROOM_NUM_THREADS or all cores)")
	fs.IntVar(&f.rounds, "rounds", 1, "processes per engine and workload; step times are pooled, rounds alternate the engines' order")
	fs.Uint64Var(&f.seed, "seed", 1, "seed for weights and inputs")
	fs.BoolVar(&f.compare, "compare-pytorch", false, "also run every workload in PyTorch and print the ratios")
	fs.StringVar(&f.python, "python", "", "`interpreter` with torch and torchvision (default: /usr/bin/python3, then python3 on $PATH)")
	fs.StringVar(&f.script, "pytorch-script", "", "`path` of "+bench.ScriptPath+" (default: found from the working directory)")
	fs.BoolVar(&f.markdown, "markdown", false, "print the table as Markdown")
	fs.StringVar(&f.cpuprofile, "cpuprofile", "", "write a CPU profile of headroom's timed steps to `file` (one workload only)")
	fs.BoolVar(&f.opProfile, "op-profile", false, "print headroom's kernel time per op for each workload")
	fs.StringVar(&f.child, "child", "", "(internal) measure this workload in this process and print the result line")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("bench: unexpected argument %q", fs.Arg(0))
	}
	if f.steps < 1 || f.warmup < 0 || f.rounds < 1 {
		return fmt.Errorf("bench: --steps and --rounds must be at least 1, --warmup not negative")
	}
	given := false
	fs.Visit(func(fl *flag.Flag) { given = given || fl.Name == "threads" })
	var err error
	if f.threads, err = setThreads(given, f.threads, os.Stderr); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if f.child != "" {
		return benchChild(ctx, f, os.Stdout, os.Stderr)
	}
	ws, err := bench.ParseWorkloads(f.workloads)
	if err != nil {
		return err
	}
	if f.cpuprofile != "" && len(ws) != 1 {
		return fmt.Errorf("bench: --cpuprofile needs exactly one workload (--workloads NAME)")
	}
	if f.cpuprofile != "" {
		// Found out now, not after the measurements.
		if err := checkOutputPath(f.cpuprofile); err != nil {
			return fmt.Errorf("bench: --cpuprofile: %w", err)
		}
	}
	return benchRun(ctx, f, ws, os.Stdout, os.Stderr)
}

func benchRun(ctx context.Context, f benchFlags, ws []bench.Workload, out, log io.Writer) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	d := &bench.Driver{
		Warmup: f.warmup, Steps: f.steps, Threads: f.threads, Rounds: f.rounds, Seed: f.seed, Log: log,
		Child: func(name string) []string {
			argv := []string{exe, "bench", "--child", name}
			if f.cpuprofile != "" {
				argv = append(argv, "--cpuprofile", f.cpuprofile)
			}
			if f.opProfile {
				argv = append(argv, "--op-profile")
			}
			return argv
		},
	}
	ptVersion := ""
	if f.compare {
		cands := []string{"/usr/bin/python3", "python3"}
		if f.python != "" {
			cands = []string{f.python}
		}
		py, v, err := bench.FindPython(ctx, cands)
		if err != nil {
			return err
		}
		script := f.script
		if script == "" {
			if script, err = bench.FindScript(); err != nil {
				return err
			}
		}
		d.Python, d.Script, ptVersion = py, script, v
	}
	fmt.Fprintf(out, "headroom %s bench: %d threads, %d warm-up + %d timed steps, %d round(s); %s/%s, %d CPUs, sgemm kernel %s\n",
		version, f.threads, f.warmup, f.steps, f.rounds, runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), gemm.Kernel())
	if f.compare {
		fmt.Fprintf(out, "PyTorch %s (%s)\n", ptVersion, d.Python)
	}
	rows, err := d.Run(ctx, ws)
	if len(rows) > 0 {
		fmt.Fprintln(out)
		if werr := bench.WriteTable(out, rows, f.markdown); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		return err
	}
	for _, r := range rows {
		if r.Headroom.Err != "" || r.PyTorch.Err != "" {
			return fmt.Errorf("bench: some measurements failed (see above)")
		}
	}
	return nil
}

// benchChild measures one workload in this process and prints its result
// line on out.
func benchChild(ctx context.Context, f benchFlags, out, log io.Writer) error {
	w, err := bench.Lookup(f.child)
	if err != nil {
		return err
	}
	o := bench.Options{Warmup: f.warmup, Steps: f.steps, Threads: f.threads, Seed: f.seed, CPUProfile: f.cpuprofile, Progress: log}
	if f.opProfile {
		o.OpProfile = log
	}
	res, err := bench.RunHeadroom(ctx, w, o)
	res.Version = version
	if err != nil {
		res.Error = err.Error()
	}
	if werr := bench.WriteResult(out, res); werr != nil {
		return werr
	}
	return err
}
