package main

import (
	"bytes"
	"context"
	"io"
	"os/exec"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/cpu"
	"github.com/headroom-ml/headroom/internal/bench"
	"github.com/headroom-ml/headroom/internal/cpuid"
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/transform"
)

func TestBenchFlags(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "--workloads", "resnet9000"},
		{"bench", "--steps", "0"},
		{"bench", "--rounds", "0"},
		{"bench", "--cpuprofile", "x.pprof"}, // needs exactly one workload
		{"bench", "extra"},
		{"bench", "--threads", "0"},
		{"bench", "--threads", "-2"},
		{"bench", "--model", "resnet9000"},
		{"bench", "--model", "mlp", "--batch", "0"},
		{"bench", "--batch", "4"}, // --batch is for --model
		{"bench", "--model", "mlp", "--workloads", "gpt"},
		{"bench", "--precision", "fp16-mixed"},
		{"bench", "--child", "zoo:mlp:x"},
		{"bench", "--child", "zoo:nosuchmodel:2"},
	} {
		if err := run(context.Background(), args); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

// bench -h is in the --flag form of the other subcommands, lists the zoo's
// models for --model and hides the internal --child flag.
func TestBenchHelp(t *testing.T) {
	var f benchFlags
	fs := benchFlagSet(&f)
	var help strings.Builder
	writeBenchUsage(&help, fs)
	h := help.String()
	for _, want := range []string{"Usage: headroom bench [flags]", "\n  --model list\n", "\n  --precision string\n", "\n  --compare-pytorch\n", "resnet152-128", "(zoo model mlp-1024)", "OPENBLAS_CORETYPE", "--op-profile=shapes"} {
		if !strings.Contains(h, want) {
			t.Errorf("bench -h lacks %q:\n%s", want, h)
		}
	}
	for _, bad := range []string{"--child", "\n  -model", "(internal)"} {
		if strings.Contains(h, bad) {
			t.Errorf("bench -h has %q:\n%s", bad, h)
		}
	}
	if out, code := runChild(t, nil, "bench", "-h"); code != 0 || !strings.Contains(out, "Usage: headroom bench") {
		t.Errorf("bench -h: exit %d, output:\n%s", code, out)
	}
}

// --op-profile is a boolean flag that also takes =shapes and =shapes:N;
// its String is what the parent passes its children, so it parses back to
// the same setting.
func TestBenchOpProfileFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want opProfileFlag
		ok   bool
	}{
		{nil, opProfileFlag{}, true},
		{[]string{"--op-profile"}, opProfileFlag{on: true}, true},
		{[]string{"--op-profile=true"}, opProfileFlag{on: true}, true},
		{[]string{"--op-profile=ops"}, opProfileFlag{on: true}, true},
		{[]string{"--op-profile=false"}, opProfileFlag{}, true},
		{[]string{"--op-profile=shapes"}, opProfileFlag{on: true, shapes: bench.DefaultOpShapes}, true},
		{[]string{"--op-profile=shapes:12"}, opProfileFlag{on: true, shapes: 12}, true},
		{[]string{"--op-profile", "--workloads", "gpt"}, opProfileFlag{on: true}, true},
		{[]string{"--op-profile=shapes:0"}, opProfileFlag{}, false},
		{[]string{"--op-profile=shapes:x"}, opProfileFlag{}, false},
		{[]string{"--op-profile=shape"}, opProfileFlag{}, false},
	} {
		var f benchFlags
		fs := benchFlagSet(&f)
		fs.SetOutput(io.Discard)
		err := fs.Parse(c.args)
		if (err == nil) != c.ok || c.ok && f.opProfile != c.want {
			t.Errorf("%v: got %+v, %v; want %+v (ok %v)", c.args, f.opProfile, err, c.want, c.ok)
			continue
		}
		if !c.ok {
			continue
		}
		var back opProfileFlag
		if err := back.Set(f.opProfile.String()); err != nil || back != f.opProfile {
			t.Errorf("%v: %q parses to %+v, %v", c.args, f.opProfile.String(), back, err)
		}
	}
}

func TestBenchPrecision(t *testing.T) {
	for _, c := range []struct {
		in   string
		want transform.Precision
		ok   bool
	}{{"fp32", transform.FP32, true}, {"32-true", transform.FP32, true}, {"bf16-mixed", transform.BF16Mixed, true},
		{"bf16-true", transform.BF16True, true}, {"bf16", 0, false}, {"16-mixed", 0, false}, {"fp16-mixed", 0, false}} {
		got, err := benchPrecision(c.in)
		if (err == nil) != c.ok || c.ok && got != c.want {
			t.Errorf("benchPrecision(%q) = %v, %v", c.in, got, err)
		}
	}
}

// A zoo model at any batch size runs through the same child protocol, in
// bf16-mixed and bf16-true too, and reports the flops of its step.
func TestBenchChildZooModel(t *testing.T) {
	defer parallel.SetThreads(parallel.Threads())
	for _, prec := range []string{"bf16-mixed", "bf16-true"} {
		var out, log bytes.Buffer
		f := benchFlags{child: "zoo:cnn:4", steps: 1, warmup: 0, threads: 1, seed: 1, precision: prec}
		if err := benchChild(context.Background(), f, &out, &log); err != nil {
			t.Fatalf("%s: %v\n%s", prec, err, log.String())
		}
		rs, err := bench.ScanResults(&out, nil)
		if err != nil || len(rs) != 1 {
			t.Fatalf("%s: results %v, %v:\n%s", prec, rs, err, out.String())
		}
		r := rs[0]
		if r.Workload != "cnn" || r.Batch != 4 || len(r.Steps) != 1 || r.Precision != prec || r.Flops <= 0 {
			t.Errorf("%s: result %+v", prec, r)
		}
	}
}

// The embedded PyTorch script runs a bf16-true step (a bfloat16 model,
// inputs and Adam) where a Python with torch is installed; elsewhere
// (CI) the test skips.
func TestBenchPyTorchBF16True(t *testing.T) {
	ctx := context.Background()
	py, _, err := bench.FindPython(ctx, []string{"/usr/bin/python3", "python3"})
	if err != nil {
		t.Skip(err)
	}
	script, err := bench.WriteScript(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ws, err := bench.ParseWorkloads("mlp")
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{script}, bench.PyTorchArgs(ws[0])...)
	args = append(args, "--precision", "bf16-true", "--warmup", "0", "--steps", "1", "--threads", "1")
	var out, log bytes.Buffer
	cmd := exec.CommandContext(ctx, py, args...)
	cmd.Stdout, cmd.Stderr = &out, &log
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	rs, err := bench.ScanResults(&out, nil)
	if err != nil || len(rs) != 1 {
		t.Fatalf("results %v, %v:\n%s", rs, err, out.String())
	}
	if r := rs[0]; r.Error != "" || r.Precision != "bf16-true" || len(r.Steps) != 1 {
		t.Errorf("result %+v\n%s", r, log.String())
	}
}

// The child protocol: one measurement, one result line on standard output.
func TestBenchChild(t *testing.T) {
	defer parallel.SetThreads(parallel.Threads())
	var out, log bytes.Buffer
	f := benchFlags{child: "mlp", steps: 1, warmup: 0, threads: 1, seed: 1, opProfile: opProfileFlag{on: true}}
	if err := benchChild(context.Background(), f, &out, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	rs, err := bench.ScanResults(&out, nil)
	if err != nil || len(rs) != 1 {
		t.Fatalf("results %v, %v:\n%s", rs, err, out.String())
	}
	r := rs[0]
	if r.Workload != "mlp" || r.Engine != bench.Headroom || len(r.Steps) != 1 || r.Batch != 128 || r.Planned <= 0 || r.RSSPeak <= 0 {
		t.Errorf("result %+v", r)
	}
	if !strings.Contains(log.String(), "time per step by op") || !strings.Contains(log.String(), "matmul") {
		t.Errorf("no op profile in the log:\n%s", log.String())
	}
}

// The table's peak is the higher of the two measurements: a first one
// taken while a neighbour held a core (half the peak) must not double
// every fraction of it.
func TestHigherPeak(t *testing.T) {
	disturbed, quiet := cpu.Peak{FLOPS: 96.6e9}, cpu.Peak{FLOPS: 191.2e9}
	for _, c := range []struct {
		first, second cpu.Peak
		want          float64
		again         bool
	}{{disturbed, quiet, 191.2e9, true}, {quiet, disturbed, 191.2e9, false}, {quiet, quiet, 191.2e9, false}} {
		got, again := higherPeak(c.first, c.second)
		if got.FLOPS != c.want || again != c.again {
			t.Errorf("higherPeak(%v, %v) = %v, %v", c.first.FLOPS, c.second.FLOPS, got.FLOPS, again)
		}
	}
}

// --recompute takes none or selective; a child measures with gradients in
// the arena unless --gradient-buffers, and with the recomputation asked
// for, and its result says so.
func TestBenchRecomputeAndGradientBuffers(t *testing.T) {
	for _, c := range []struct {
		in   string
		want train.Recompute
		ok   bool
	}{{"", train.NoRecompute, true}, {"none", train.NoRecompute, true}, {"selective", train.Selective, true}, {"regions", train.NoRecompute, false}, {"auto", train.NoRecompute, false}} {
		got, err := benchRecompute(c.in)
		if (err == nil) != c.ok || c.ok && got != c.want {
			t.Errorf("benchRecompute(%q) = %v, %v", c.in, got, err)
		}
	}
	if err := run(context.Background(), []string{"bench", "--recompute", "regions"}); err == nil || !strings.Contains(err.Error(), "--recompute") {
		t.Errorf("--recompute regions: %v", err)
	}
	defer parallel.SetThreads(parallel.Threads())
	for _, c := range []struct {
		bufs      bool
		recompute string
	}{{false, "none"}, {true, "selective"}} {
		var out, log bytes.Buffer
		f := benchFlags{child: "zoo:cnn:4", steps: 1, warmup: 0, threads: 1, seed: 1, precision: "fp32", gradBufs: c.bufs, recompute: c.recompute}
		if err := benchChild(context.Background(), f, &out, &log); err != nil {
			t.Fatalf("%v\n%s", err, log.String())
		}
		rs, err := bench.ScanResults(&out, nil)
		if err != nil || len(rs) != 1 {
			t.Fatalf("results %v, %v:\n%s", rs, err, out.String())
		}
		want := c.recompute
		if want == "none" {
			want = ""
		}
		if r := rs[0]; r.ArenaGradients == c.bufs || r.Recompute != want || r.Planned != r.Allocated {
			t.Errorf("--gradient-buffers %v --recompute %s: result %+v", c.bufs, c.recompute, r)
		}
	}
}

// The machine line names AMX where bf16 products run on it, says why not
// where the CPU has it and they do not, and says nothing of AMX on a CPU
// without it.
func TestAMXNote(t *testing.T) {
	amx := cpuid.Features{AVX512F: true, AVX512BF16: true, AMXTile: true, AMXBF16: true}
	for _, c := range []struct {
		name     string
		detected cpuid.Features
		caps     cpu.Capabilities
		want     string
	}{
		{"runs", amx, cpu.Capabilities{NativeBF16: true, AMX: true, AMXReason: "AMX on: self-check bitwise"}, "on amx-bf16 tiles"},
		{"refused", amx, cpu.Capabilities{NativeBF16: true, AMXReason: "AMX off: arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA): operation not permitted"}, "not used: AMX off: arch_prctl"},
		{"native off", amx, cpu.Capabilities{AMXReason: "AMX on"}, "native bf16 off"},
		{"no AMX", cpuid.Features{AVX512F: true}, cpu.Capabilities{NativeBF16: true, AMXReason: "the CPU (or OS) has no AMX-BF16"}, ""},
	} {
		got := amxNote(c.detected, c.caps)
		if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("%s: amxNote = %q, want %q", c.name, got, c.want)
		}
	}
	if d := cpuid.Detected; !d.AMXTile || !d.AMXBF16 {
		if line := machineLine(); strings.Contains(line, "amx-bf16") || strings.Contains(line, "AMX") {
			t.Errorf("machine without AMX: %q", line)
		}
	}
}
