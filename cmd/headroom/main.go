// Command headroom trains models within a memory budget and shows where
// every byte goes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"runtime"
	"sync"
	"syscall"

	"github.com/headroom-ml/headroom/internal/parallel"
)

const usage = `headroom — deep-learning training that never runs out of memory by surprise

Usage:
  headroom <command> [flags]

Commands:
  train     train a model of the zoo (Fashion-MNIST, generated data or --data), checkpoint and resume it
  plan      print the memory plan of a training step without running it
  bench     measure step time and memory of the standard workloads (and PyTorch's)
  viz       show a memory snapshot (headroom's or PyTorch's) in the browser
  summary   print a model module by module: parameters, output shapes, activation bytes
  report    render a run's --log (or two, compared) as one HTML page with charts
  gan       train ESRGAN (generator and discriminator) on photos, or print its memory table
  upscale   4× an image with RRDBNet weights in tiles planned to fit a budget
  prepare   turn a text file into a token file, an image folder into tar shards
  version   print the version

Run 'headroom <command> -h' for the flags of a command.
`

const version = "0.1.0-dev"

func main() {
	os.Exit(mainExit(os.Args[1:], os.Stderr))
}

// mainExit runs a command as the process does and returns its exit status.
func mainExit(args []string, stderr io.Writer) int {
	ctx, stop := signalContext(stderr)
	defer stop()
	if err := run(ctx, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "headroom:", err)
		return 1
	}
	return 0
}

// parseFlags parses a command's flags. A mistake is returned, to be printed
// once by main in the --flag form the usage uses, with a pointer to -h;
// the flag package would print it, then the whole usage, and main again.
func parseFlags(fs *flag.FlagSet, args []string) error {
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(out)
	fs.Usage = usage
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.Usage()
		return err
	case err != nil:
		msg := dashFlag.ReplaceAllString(err.Error(), "$1--$2")
		if name := undefinedFlag(err); name != "" {
			if s := suggest(name, flagNames(fs)); s != "" {
				msg = fmt.Sprintf("unknown flag --%s; did you mean --%s?", name, s)
			}
		}
		return fmt.Errorf("%s: %s (see: headroom %s -h)", fs.Name(), msg, fs.Name())
	}
	return nil
}

// dashFlag finds a flag named with one dash in the flag package's errors.
var dashFlag = regexp.MustCompile(`(^|\s)-([A-Za-z])`)

// errInterrupted is the cause of the context of a run that got SIGINT or
// SIGTERM.
var errInterrupted = errors.New("interrupted")

// signalContext returns a context cancelled by the first SIGINT or SIGTERM,
// which also restores their default handling: work that does not notice
// the cancellation soon (or a user in a hurry) is ended by a second signal.
// stop releases the signals and the context.
func signalContext(stderr io.Writer) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-ch:
			signal.Stop(ch)
			fmt.Fprintf(stderr, "\nheadroom: %v: stopping (send it again to exit at once)\n", sig)
			cancel(fmt.Errorf("%w (%v)", errInterrupted, sig))
		case <-done:
			signal.Stop(ch)
		}
	}()
	var once sync.Once
	return ctx, func() {
		once.Do(func() { close(done) })
		cancel(nil)
	}
}

// setThreads sets the kernels' thread count from --threads (when given) or
// else $HEADROOM_NUM_THREADS, before any work: a count below 1 (or an
// environment value that is not a positive integer) is an error, and one
// above the number of CPUs is lowered to it with a message on log (more
// workers than CPUs only take turns, slowly). It returns the count used.
func setThreads(given bool, n int, log io.Writer) (int, error) {
	what := "--threads"
	switch {
	case given && n < 1:
		return 0, fmt.Errorf("--threads %d: must be at least 1 (without --threads: $%s, else all %d CPUs)", n, parallel.EnvThreads, runtime.NumCPU())
	case given:
		if err := parallel.EnvErr(); err != nil {
			fmt.Fprintf(log, "headroom: ignoring %v: --threads %d is used\n", err, n)
		}
	default:
		if err := parallel.EnvErr(); err != nil {
			return 0, err
		}
		n, what = parallel.Threads(), "$"+parallel.EnvThreads
		if os.Getenv(parallel.EnvThreads) == "" {
			what = "the default"
		}
	}
	if cpus := runtime.NumCPU(); n > cpus {
		fmt.Fprintf(log, "headroom: %s %d is more than the %d CPUs: using %d threads\n", what, n, cpus, cpus)
		n = cpus
	}
	parallel.SetThreads(n)
	return n, nil
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return fmt.Errorf("no command given")
	}
	switch args[0] {
	case "train":
		return cmdTrain(ctx, args[1:])
	case "plan":
		return cmdPlan(ctx, args[1:])
	case "bench":
		return cmdBench(ctx, args[1:])
	case "viz":
		return cmdViz(ctx, args[1:])
	case "report":
		return cmdReport(ctx, args[1:])
	case "summary":
		return cmdSummary(ctx, args[1:])
	case "gan":
		return cmdGAN(ctx, args[1:])
	case "prepare":
		return cmdPrepare(ctx, args[1:])
	case "upscale":
		return cmdUpscale(ctx, args[1:])
	case "version", "--version":
		fmt.Println("headroom", version)
		return nil
	case "help", "-h", "--help":
		fmt.Print(usage)
		return nil
	}
	if s := suggest(args[0], commands); s != "" {
		return fmt.Errorf("unknown command %q; did you mean %q? (see: headroom help)", args[0], s)
	}
	fmt.Fprint(os.Stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}
