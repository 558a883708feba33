package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/headroom-ml/headroom/cpu"
	"github.com/headroom-ml/headroom/internal/bench"
	"github.com/headroom-ml/headroom/internal/cpuid"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/transform"
	"github.com/headroom-ml/headroom/zoo"
)

type benchFlags struct {
	workloads  string
	models     string
	batch      int
	precision  string
	inBack     bool
	gradBufs   bool
	recompute  string
	steps      int
	warmup     int
	threads    int
	rounds     int
	seed       uint64
	compare    bool
	python     string
	script     string
	markdown   bool
	noPeak     bool
	cpuprofile string
	opProfile  opProfileFlag
	child      string
	// profile is --profile (benchprofile.go); profilePid and profileName
	// name a child's process in it.
	profile     string
	profilePid  int
	profileName string
}

// benchFlagSet defines bench's flags on a new flag set.
func benchFlagSet(f *benchFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.StringVar(&f.workloads, "workloads", "all", "comma-separated `list` of standard workloads to run: "+strings.Join(bench.Names(), ", ")+", or all")
	fs.StringVar(&f.models, "model", "", "comma-separated `list` of zoo models to train instead of the standard workloads (the names train and plan take): "+strings.Join(zoo.Names(), ", "))
	fs.IntVar(&f.batch, "batch", 0, "batch size for --model (default: the standard workload's batch for that model, else 8)")
	fs.StringVar(&f.precision, "precision", "fp32", "precision of both engines' training steps: fp32, bf16-mixed (PyTorch: torch.autocast to bfloat16 on the cpu) or bf16-true (PyTorch: model.to(torch.bfloat16), bfloat16 inputs and Adam; Lightning's \"bf16-true\"); the sgemm workload stays float32")
	fs.BoolVar(&f.inBack, "optimizer-in-backward", false, "headroom only: update each parameter in the backward pass as soon as its gradient is final and free the gradient (train's --optimizer-in-backward: the same weights, no gradient buffers); PyTorch 1.13 has no such mode and keeps its gradients, so say so when quoting the memory ratio")
	fs.BoolVar(&f.gradBufs, "gradient-buffers", false, "headroom only: keep every gradient in a buffer of its own for the whole step; by default gradients live in the step's arena from the backward pass to the optimizer step (train.Config.GradientBuffers unset: the same weights), as the PyTorch script's zero_grad(set_to_none=True) has them")
	fs.StringVar(&f.recompute, "recompute", "none", "headroom only: activations to recompute in the backward pass: none, or selective (activations and norms: less memory, more time; PyTorch recomputes nothing, so say so when quoting ratios)")
	fs.IntVar(&f.steps, "steps", 7, "timed steps per workload and round (the issue's comparison asks for at least 5)")
	fs.IntVar(&f.warmup, "warmup", 2, "untimed steps before the timed ones")
	fs.IntVar(&f.threads, "threads", 0, "worker threads, for both engines (default $HEADROOM_NUM_THREADS or all cores)")
	fs.IntVar(&f.rounds, "rounds", 1, "processes per engine and workload; step times are pooled, rounds alternate the engines' order")
	fs.Uint64Var(&f.seed, "seed", 1, "seed for weights and inputs")
	fs.BoolVar(&f.compare, "compare-pytorch", false, "also run every workload in PyTorch and print the ratios")
	fs.StringVar(&f.python, "python", "", "`interpreter` with torch and torchvision (default: /usr/bin/python3, then python3 on $PATH)")
	fs.StringVar(&f.script, "pytorch-script", "", "`path` of a PyTorch script to use instead of the embedded "+bench.ScriptPath)
	fs.BoolVar(&f.markdown, "markdown", false, "print the table as Markdown")
	fs.BoolVar(&f.noPeak, "no-peak", false, "do not measure the FMA peak (nor print the fraction of it each workload reached)")
	fs.StringVar(&f.cpuprofile, "cpuprofile", "", "write a CPU profile of headroom's timed steps to `file` (one workload only)")
	fs.Var(&f.opProfile, "op-profile", "print headroom's kernel time per op for each workload, beside the planner's cost-model estimate for it; --op-profile=shapes also lists under each op the input dtypes and shapes of its calls (with a matrix product's M×N×K and the op's parameters: transposes, strides, padding), the "+strconv.Itoa(bench.DefaultOpShapes)+" that take the most time and a line for the rest; --op-profile=shapes:N lists N")
	fs.StringVar(&f.profile, "profile", "", "write a profiler trace of headroom's measurements to `file`, as train --profile does (Chrome trace-event JSON for ui.perfetto.dev or chrome://tracing: a slice per executed node and per step, warm-up steps included, memory and whole-process counters); each workload and round is a process of its own in it. Profiling every node slows the timed steps a little")
	fs.StringVar(&f.child, "child", "", "(internal) measure this workload in this process and print the result line")
	fs.IntVar(&f.profilePid, "profile-pid", 0, "(internal) with --child: the process id of this child's trace")
	fs.StringVar(&f.profileName, "profile-name", "", "(internal) with --child: the process name of this child's trace")
	return fs
}

// opProfileFlag is --op-profile: a boolean flag (plain --op-profile is
// the table by op) that also takes =shapes or =shapes:N, for the input
// shapes of each op's calls under its line.
type opProfileFlag struct {
	on     bool
	shapes int // input shapes listed per op; 0: none
}

func (p *opProfileFlag) IsBoolFlag() bool { return true }

func (p *opProfileFlag) String() string {
	switch {
	case p == nil || !p.on:
		return "false"
	case p.shapes == 0:
		return "true"
	case p.shapes == bench.DefaultOpShapes:
		return "shapes"
	}
	return "shapes:" + strconv.Itoa(p.shapes)
}

func (p *opProfileFlag) Set(s string) error {
	if on, err := strconv.ParseBool(s); err == nil {
		*p = opProfileFlag{on: on}
		return nil
	}
	switch n, found := strings.CutPrefix(s, "shapes:"); {
	case s == "ops":
		*p = opProfileFlag{on: true}
	case s == "shapes":
		*p = opProfileFlag{on: true, shapes: bench.DefaultOpShapes}
	case found:
		k, err := strconv.Atoi(n)
		if err != nil || k < 1 {
			return fmt.Errorf("want shapes:N with N at least 1, not %q", s)
		}
		*p = opProfileFlag{on: true, shapes: k}
	default:
		return fmt.Errorf("want true, false, ops, shapes or shapes:N, not %q", s)
	}
	return nil
}

// printPublicFlags is printFlags without the (internal) flags.
func printPublicFlags(w io.Writer, fs *flag.FlagSet) {
	pub := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
	fs.VisitAll(func(fl *flag.Flag) {
		if !strings.HasPrefix(fl.Usage, "(internal)") {
			pub.Var(fl.Value, fl.Name, fl.Usage)
			pub.Lookup(fl.Name).DefValue = fl.DefValue
		}
	})
	printFlags(w, pub)
}

func cmdBench(ctx context.Context, args []string) error {
	var f benchFlags
	fs := benchFlagSet(&f)
	fs.Usage = func() { writeBenchUsage(fs.Output(), fs) }
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	return benchMain(ctx, f, fs)
}

// writeBenchUsage writes bench -h.
func writeBenchUsage(w io.Writer, fs *flag.FlagSet) {
	var list strings.Builder
	for _, name := range bench.Names() {
		if wl, err := bench.Lookup(name); err == nil {
			fmt.Fprintf(&list, "  %-10s %s\n", wl.Name, wl.Description)
		}
	}
	fmt.Fprintf(w, `Usage: headroom bench [flags]

Runs headroom's standard performance workloads (models of the zoo, as train
and plan know them, at fixed batch sizes), or with --model any zoo model, and
prints, for each, the training step time (median, with the minimum and
maximum in brackets and the spread: half the interquartile range), the
throughput, the training memory, and the fraction of the machine's
arithmetic peak it reached (at the median step, and in brackets at the
fastest: the peak is the best of many tries, so on a shared machine the
bracketed figure is the like-for-like one). All use Adam, in float32 unless --precision says
otherwise:

%s
It first prints the CPU, the instruction sets headroom's kernels use on it,
and the machine's FMA peak, measured with a micro-benchmark on --threads
threads (the widest FMA instruction the kernels use, independent chains).

Each workload runs in a fresh child process (this binary, re-executed), so
that its memory is measured from a clean start: training memory is the peak
resident memory (VmHWM) minus the resident memory just before the first
step, when the parameters and the input batch exist but no gradient,
optimizer state or activation does (PyTorch creates those during its first
step). "planned" is what headroom's memory plan predicts for the same bytes.
The first --warmup steps are not timed (headroom compiles its step in the
first one).

With --compare-pytorch the same workloads also run in PyTorch (Debian's
python3-torch, through %s, embedded in this
binary, so it works from any directory), in a child process of their own,
alternating with headroom round by round, with the same thread count, and
the table gives the ratios headroom/PyTorch (below 1 is better for
headroom). With --rounds 2 or more the time ratio has in brackets the
ratio of the two engines' fastest rounds (each round's median step): on a
shared machine a neighbour's busy phase slows whole rounds of either
engine, so when the two figures differ the bracketed one is like for like.
Before that, bench checks that PyTorch runs on its proper
kernels: it reads the BLAS torch was built with, the library file whose
sgemm torch calls (Debian's torch links a generic libblas.so.3: with only
libblas3 installed that is the reference BLAS, 10-40x slower, and bench
refuses to compare; install libopenblas0-pthread) and, for OpenBLAS, the
core OpenBLAS chose (OPENBLAS_VERBOSE=2); when that core is narrower than
the CPU (for example "Prescott" on an AVX-512 machine) it sets
OPENBLAS_CORETYPE for PyTorch's processes only, and says so.

To compare as on a narrower CPU, set HEADROOM_MAX_ISA (avx2, avx512,
avx512_bf16, or none): headroom's kernels, the FMA peak and, with
--compare-pytorch, PyTorch's kernels are all limited to it (oneDNN by
ONEDNN_MAX_CPU_ISA, ATen by ATEN_CPU_CAPABILITY, OpenBLAS by
OPENBLAS_CORETYPE), and the header says so. On an AVX-512 machine,
HEADROOM_MAX_ISA=avx2 checks the AVX2 paths of both engines side by side.

Examples:
  headroom bench --threads 2 --compare-pytorch
  headroom bench --workloads mlp,gpt --steps 10 --rounds 2 --compare-pytorch
  headroom bench --model resnet50 --batch 4 --compare-pytorch
  headroom bench --workloads gpt,rrdbnet --precision bf16-mixed --compare-pytorch
  headroom bench --workloads gpt --precision bf16-true --compare-pytorch
  HEADROOM_MAX_ISA=avx2 headroom bench --threads 2 --compare-pytorch
  headroom bench --workloads resnet18 --op-profile --cpuprofile cpu.pprof
  headroom bench --workloads gpt --steps 1 --op-profile=shapes   # which matmul takes the time
  headroom bench --workloads mlp,gpt --profile bench.json   # open in ui.perfetto.dev

Flags:
`, list.String(), bench.ScriptPath)
	printPublicFlags(w, fs)
}

// benchMain checks bench's parsed flags and runs it.
func benchMain(ctx context.Context, f benchFlags, fs *flag.FlagSet) error {
	if fs.NArg() > 0 {
		return fmt.Errorf("bench: unexpected argument %q", fs.Arg(0))
	}
	if f.steps < 1 || f.warmup < 0 || f.rounds < 1 {
		return fmt.Errorf("bench: --steps and --rounds must be at least 1, --warmup not negative")
	}
	if _, err := benchPrecision(f.precision); err != nil {
		return err
	}
	if _, err := benchRecompute(f.recompute); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	if f.batch < 0 || given["batch"] && f.batch == 0 {
		return fmt.Errorf("bench: --batch must be at least 1")
	}
	if given["batch"] && f.models == "" {
		return fmt.Errorf("bench: --batch applies to --model (the standard workloads have fixed batch sizes)")
	}
	if given["workloads"] && f.models != "" {
		return fmt.Errorf("bench: --workloads and --model are alternatives: give one")
	}
	var err error
	if f.threads, err = setThreads(given["threads"], f.threads, os.Stderr); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if f.child != "" {
		return benchChild(ctx, f, os.Stdout, os.Stderr)
	}
	var ws []bench.Workload
	if f.models != "" {
		ws, err = bench.ParseModels(f.models, f.batch)
	} else {
		ws, err = bench.ParseWorkloads(f.workloads)
	}
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
	if f.profile != "" {
		if err := checkOutputPath(f.profile); err != nil {
			return fmt.Errorf("bench: --profile: %w", err)
		}
	}
	return benchRun(ctx, f, ws, os.Stdout, os.Stderr)
}

// higherPeak is the higher of the peaks measured before and after the
// workloads (each the best of its tries); again reports whether it is the
// second.
func higherPeak(first, second cpu.Peak) (peak cpu.Peak, again bool) {
	if second.FLOPS > first.FLOPS {
		return second, true
	}
	return first, false
}

// benchPrecision parses --precision: fp32, bf16-mixed or bf16-true
// (Lightning's 32-true as well). fp16-mixed is refused: PyTorch's side
// would need a GradScaler and float16 autocast, which bench does not set up.
func benchPrecision(s string) (transform.Precision, error) {
	switch s {
	case "", "fp32", "32-true", "32":
		return transform.FP32, nil
	case "bf16-mixed":
		return transform.BF16Mixed, nil
	case "bf16-true":
		return transform.BF16True, nil
	}
	return 0, fmt.Errorf("bench: --precision %q: want fp32, bf16-mixed or bf16-true", s)
}

// benchRecompute parses --recompute.
func benchRecompute(s string) (train.Recompute, error) {
	switch s {
	case "", "none":
		return train.NoRecompute, nil
	case "selective":
		return train.Selective, nil
	}
	return train.NoRecompute, fmt.Errorf("bench: --recompute %q: want none or selective", s)
}

// amxNote says, for a CPU with AMX-BF16 (detected, before any limit),
// whether bf16 products run on its tiles, and if not why; "" for a CPU
// without.
func amxNote(detected cpuid.Features, caps cpu.Capabilities) string {
	switch {
	case caps.AMX:
		return "; bf16 products on amx-bf16 tiles"
	case !detected.AMXTile || !detected.AMXBF16:
		return ""
	case !caps.NativeBF16:
		return "; amx-bf16 not used: native bf16 off"
	case caps.AMXReason != "":
		return "; amx-bf16 not used: " + caps.AMXReason
	}
	return "; amx-bf16 not used"
}

// machineLine describes the CPU and what headroom's kernels use on it.
func machineLine() string {
	feats := strings.Join(cpuid.X86.List(), " ")
	if feats == "" {
		feats = "none detected"
	}
	switch {
	case cpuid.LimitErr != nil:
		feats += fmt.Sprintf(" (%v: ignored)", cpuid.LimitErr)
	case cpuid.MaxISA != "":
		feats += fmt.Sprintf(" (limited by HEADROOM_MAX_ISA=%s; the CPU has %s)", cpuid.MaxISA, strings.Join(cpuid.Detected.List(), " "))
	}
	feats += amxNote(cpuid.Detected, cpu.Caps())
	return fmt.Sprintf("CPU: %s (%s/%s, %d logical CPUs); vector extensions: %s\nkernels: %s",
		cpuid.ModelName(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), feats, cpu.KernelSummary())
}

func benchRun(ctx context.Context, f benchFlags, ws []bench.Workload, out, log io.Writer) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	prec, _ := benchPrecision(f.precision)
	var prof *benchProfile
	if f.profile != "" {
		if prof, err = newBenchProfile(f.profile); err != nil {
			return err
		}
		defer os.RemoveAll(prof.dir)
	}
	d := &bench.Driver{
		Warmup: f.warmup, Steps: f.steps, Threads: f.threads, Rounds: f.rounds, Seed: f.seed, Log: log,
		Precision: prec.String(),
		Child: func(name string) []string {
			argv := []string{exe, "bench", "--child", name}
			if f.cpuprofile != "" {
				argv = append(argv, "--cpuprofile", f.cpuprofile)
			}
			if f.opProfile.on {
				argv = append(argv, "--op-profile="+f.opProfile.String())
			}
			if f.inBack {
				argv = append(argv, "--optimizer-in-backward")
			}
			if f.gradBufs {
				argv = append(argv, "--gradient-buffers")
			}
			if f.recompute != "" && f.recompute != "none" {
				argv = append(argv, "--recompute", f.recompute)
			}
			if prof != nil {
				argv = append(argv, prof.childArgs(name)...)
			}
			return argv
		},
	}
	ptVersion := ""
	var peer bench.PeerCheck
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
			dir, err := os.MkdirTemp("", "headroom-bench-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			if script, err = bench.WriteScript(dir); err != nil {
				return err
			}
		}
		d.Python, d.Script, ptVersion = py, script, v
		if peer, err = bench.CheckPeer(ctx, py, script, f.threads, cpuid.X86, cpuid.MaxISA); err != nil {
			return err
		}
		d.PeerEnv = peer.Env()
	}
	fmt.Fprintf(out, "headroom %s bench: %d threads, %d warm-up + %d timed steps, %d round(s), %s\n",
		version, f.threads, f.warmup, f.steps, f.rounds, prec)
	fmt.Fprintln(out, machineLine())
	var peak cpu.Peak
	if !f.noPeak {
		peak = cpu.FMAPeak(f.threads, time.Second)
		// The best try is the peak; the median try shows how much of the
		// cores other processes took while it ran (the workloads' median
		// steps pay the same, their fastest steps least: the table gives
		// both).
		fmt.Fprintf(out, "FMA peak: %.1f GFLOP/s (%s FMAs, %d threads, micro-benchmark: best of %d tries of 10 ms; median try %.1f)\n", peak.FLOPS/1e9, peak.ISA, peak.Threads, peak.Tries, peak.Median/1e9)
	}
	if f.compare {
		fmt.Fprintf(out, "PyTorch %s (%s): %s\n", ptVersion, d.Python, peer)
	}
	rows, err := d.Run(ctx, ws)
	if prof != nil {
		// What was measured is kept, even when a measurement failed.
		n, perr := prof.finish()
		if perr == nil {
			fmt.Fprintf(log, "wrote the profiler trace of %d headroom process(es) to %s (open it in ui.perfetto.dev)\n", n, f.profile)
		} else if err == nil {
			err = perr
		}
	}
	if len(rows) > 0 && !f.noPeak {
		// Measured again after the workloads: a neighbour busy during the
		// first measurement halved it once (96.6 GFLOP/s on 2 cores, 191.2
		// a minute later), which doubled every fraction of it.
		again := cpu.FMAPeak(f.threads, time.Second)
		fmt.Fprintf(out, "FMA peak again after the workloads: %.1f GFLOP/s (median try %.1f)", again.FLOPS/1e9, again.Median/1e9)
		var higher bool
		if peak, higher = higherPeak(peak, again); higher {
			fmt.Fprint(out, "; the table uses it (the higher)")
		}
		fmt.Fprintln(out)
	}
	if len(rows) > 0 {
		fmt.Fprintln(out)
		if werr := (bench.Table{Markdown: f.markdown, Peak: peak.FLOPS}).Write(out, rows); werr != nil && err == nil {
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
	w, err := bench.LookupChild(f.child)
	if err != nil {
		return err
	}
	prec, err := benchPrecision(f.precision)
	if err != nil {
		return err
	}
	remat, err := benchRecompute(f.recompute)
	if err != nil {
		return err
	}
	o := bench.Options{Warmup: f.warmup, Steps: f.steps, Threads: f.threads, Seed: f.seed, CPUProfile: f.cpuprofile, Progress: log, Precision: prec, InBackward: f.inBack,
		GradientBuffers: f.gradBufs, Recompute: remat}
	if f.opProfile.on {
		o.OpProfile, o.OpShapes = log, f.opProfile.shapes
	}
	var watch *benchWatch
	if f.profile != "" {
		if watch, err = newBenchWatch(f); err != nil {
			return err
		}
		o.Watch = watch
	}
	res, err := bench.RunHeadroom(ctx, w, o)
	if watch != nil {
		if werr := watch.close(); werr != nil && err == nil {
			err = werr
		}
	}
	res.Version = version
	if err != nil {
		res.Error = err.Error()
	}
	if werr := bench.WriteResult(out, res); werr != nil {
		return werr
	}
	return err
}
