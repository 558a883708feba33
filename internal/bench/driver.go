package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// ScriptPath is where the PyTorch side of the benchmark lives in the
// repository (it is embedded in the binary too: WriteScript).
const ScriptPath = "scripts/bench/pytorch_bench.py"

// Driver runs each workload in fresh child processes, so that every
// measurement starts from a clean heap and its own peak resident memory:
// headroom's (the binary re-executed with a child flag) and, if Python is
// set, PyTorch's, alternating between the two round by round.
type Driver struct {
	// Child returns the command line that runs headroom's measurement of
	// one workload in a new process (see ChildArgs).
	Child func(workload string) []string
	// Python and Script run scripts/bench/pytorch_bench.py; Python empty
	// means no PyTorch comparison.
	Python, Script string

	Warmup, Steps, Threads, Rounds int
	Seed                           uint64
	// Precision is both engines' precision: "fp32" (or "") or
	// "bf16-mixed" (PyTorch: torch.autocast to bfloat16 on the cpu) or
	// "bf16-true" (PyTorch: the model, inputs and Adam in bfloat16).
	Precision string
	// PeerEnv is added to the environment of PyTorch's processes only
	// (OPENBLAS_CORETYPE when OpenBLAS misdetects the CPU: PeerCheck).
	PeerEnv []string
	// Log receives progress and everything the children print.
	Log io.Writer
}

// ChildArgs are the flags shared by both children.
func (d *Driver) childFlags() []string {
	f := []string{"--warmup", strconv.Itoa(d.Warmup), "--steps", strconv.Itoa(d.Steps),
		"--threads", strconv.Itoa(d.Threads), "--seed", strconv.FormatUint(d.Seed, 10)}
	if d.Precision != "" && d.Precision != "fp32" {
		f = append(f, "--precision", d.Precision)
	}
	return f
}

// metaArg spells a batch's metadata for the PyTorch script: "f32:8,3,32,32".
func metaArg(m trace.Meta) string {
	dt := "f32"
	if m.DType == tensor.Int64 {
		dt = "i64"
	}
	dims := make([]string, len(m.Shape))
	for i, d := range m.Shape {
		dims[i] = strconv.Itoa(d)
	}
	return dt + ":" + strings.Join(dims, ",")
}

// PyTorchArgs are the script's arguments for workload w: the zoo model's
// name and the shapes of one batch, from the zoo registry, so that the
// script holds no shapes of its own.
func PyTorchArgs(w Workload) []string {
	args := []string{"--workload", w.Name}
	if w.Model != nil {
		args = append(args, "--model", w.ZooModel, "--x", metaArg(w.X), "--y", metaArg(w.Y), "--classes", strconv.Itoa(w.Classes))
	}
	return args
}

func (d *Driver) logf(format string, args ...any) {
	if d.Log != nil {
		fmt.Fprintf(d.Log, format, args...)
	}
}

// Run measures every workload and returns the table rows.
func (d *Driver) Run(ctx context.Context, ws []Workload) ([]Comparison, error) {
	rounds := max(1, d.Rounds)
	var rows []Comparison
	for i, w := range ws {
		d.logf("[%d/%d] %s: %s\n", i+1, len(ws), w.Name, w.Description)
		var hr, pt []Result
		for r := 0; r < rounds; r++ {
			engines := []string{Headroom, PyTorch}
			if r%2 == 1 {
				engines = []string{PyTorch, Headroom} // alternate A/B, B/A
			}
			for _, e := range engines {
				if e == PyTorch && d.Python == "" {
					continue
				}
				if err := ctx.Err(); err != nil {
					return rows, err
				}
				start := time.Now()
				res := d.runOne(ctx, w, e)
				if res.Error != "" {
					d.logf("  %s %s round %d failed: %s\n", w.Name, e, r+1, res.Error)
				} else {
					s := res.Summary()
					d.logf("  %s %s round %d: median %s [%s–%s], training memory %s (%.0fs)\n", w.Name, e, r+1,
						FormatSeconds(s.Median), FormatSeconds(s.Min), FormatSeconds(s.Max), fmtBytes(res.RSSDelta()), time.Since(start).Seconds())
				}
				if e == Headroom {
					hr = append(hr, res)
				} else {
					pt = append(pt, res)
				}
			}
		}
		rows = append(rows, Comparison{Workload: w, Headroom: Merge(hr), PyTorch: Merge(pt)})
	}
	return rows, nil
}

func fmtBytes(n int64) string { return device.FormatBytes(max(0, n)) }

// runOne runs one child and returns its result (with Error set on failure).
func (d *Driver) runOne(ctx context.Context, w Workload, engine string) Result {
	var argv []string
	env := os.Environ()
	t := strconv.Itoa(d.Threads)
	if engine == Headroom {
		argv = append(d.Child(w.ChildName()), d.childFlags()...)
		env = append(env, "HEADROOM_NUM_THREADS="+t)
	} else {
		argv = append(append([]string{d.Python, d.Script}, PyTorchArgs(w)...), d.childFlags()...)
		env = append(env, "OMP_NUM_THREADS="+t, "OPENBLAS_NUM_THREADS="+t, "MKL_NUM_THREADS="+t)
		env = append(env, d.PeerEnv...)
	}
	fail := Result{Workload: w.Name, Engine: engine}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = env
	var errBuf bytes.Buffer
	stderr := io.Writer(&errBuf)
	if d.Log != nil {
		stderr = io.MultiWriter(&errBuf, d.Log)
	}
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fail.Error = err.Error()
		return fail
	}
	if err := cmd.Start(); err != nil {
		fail.Error = err.Error()
		return fail
	}
	results, scanErr := ScanResults(out, d.Log)
	waitErr := cmd.Wait()
	switch {
	case scanErr != nil:
		fail.Error = scanErr.Error()
	case waitErr != nil:
		fail.Error = fmt.Sprintf("%s: %v%s", filepath.Base(argv[0]), waitErr, lastLine(errBuf.String()))
	case len(results) != 1:
		fail.Error = fmt.Sprintf("%s printed %d results, want 1", filepath.Base(argv[0]), len(results))
	default:
		r := results[0]
		if r.Workload != w.Name || r.Engine != engine {
			fail.Error = fmt.Sprintf("got a result for %s/%s, want %s/%s", r.Engine, r.Workload, engine, w.Name)
			return fail
		}
		return r
	}
	return fail
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return " (" + s + ")"
}

// FindPython returns the first interpreter of candidates that can import
// torch (and torchvision), with torch's version.
func FindPython(ctx context.Context, candidates []string) (path, version string, err error) {
	var errs []error
	for _, c := range candidates {
		if c == "" {
			continue
		}
		p, err := exec.LookPath(c)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		out, err := exec.CommandContext(cctx, p, "-c", "import torch, torchvision; print(torch.__version__)").Output()
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s cannot import torch and torchvision", p))
			continue
		}
		return p, strings.TrimSpace(string(out)), nil
	}
	return "", "", fmt.Errorf("bench: no Python with torch found: %w", errors.Join(errs...))
}
