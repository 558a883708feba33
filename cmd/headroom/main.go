// Command headroom trains models within a memory budget and shows where
// every byte goes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

const usage = `headroom — deep-learning training that never runs out of memory by surprise

Usage:
  headroom <command> [flags]

Commands:
  train     train a model on Fashion-MNIST and report test accuracy
  plan      print the memory plan of a training step without running it
  bench     measure step time and memory of the standard workloads (and PyTorch's)
  viz       show a memory snapshot (headroom's or PyTorch's) in the browser
  version   print the version

Run 'headroom <command> -h' for the flags of a command.
`

const version = "0.1.0-dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "headroom:", err)
		os.Exit(1)
	}
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
	case "version", "--version":
		fmt.Println("headroom", version)
		return nil
	case "help", "-h", "--help":
		fmt.Print(usage)
		return nil
	}
	fmt.Fprint(os.Stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}
