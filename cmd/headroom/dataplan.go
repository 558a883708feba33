package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/headroom-ml/headroom/budget"
	"github.com/headroom-ml/headroom/dataset"
	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/internal/parallel"
	"github.com/headroom-ml/headroom/zoo"
)

// defaultPrefetch is the loader's number of staging buffers (its prefetch
// depth) when the budget allows: one held by the step and one filled
// ahead, dataset.Config's own default. --prefetch raises or lowers it.
const defaultPrefetch = 2

// loaderPlan is what a data loader holds at one prefetch depth, as the
// memory plan counts it.
type loaderPlan struct {
	mem dataset.Memory
	// allocated is the staging the device allocator hands out (each
	// request rounded to its blocks), category input; reserved is the
	// segments it maps for them when they are alone on the device: an
	// upper bound next to the step, whose segments they may share.
	allocated, reserved int64
}

// planLoader plans a loader of src under cfg. Its staging is allocated on
// meta devices (shapes only, no memory), as the loader asks for it: once
// under the least capacity that could hold it (each request in a segment
// of its own rounded to a page, where the allocator's regular 2 and 20 MiB
// segments do not fit), else uncapped; reserved is what the first that
// works maps. Training allocates it first, under that same capacity
// (allocStaging), so it maps the same segments.
func planLoader(src any, cfg dataset.Config) (loaderPlan, error) {
	m, err := dataset.PlanMemory(src, cfg)
	if err != nil {
		return loaderPlan{}, err
	}
	var tight int64
	for _, n := range []int64{m.StagingInputs, m.StagingTargets} {
		tight += int64(m.Depth) * ((device.RoundSize(n) + pageSize - 1) / pageSize * pageSize)
	}
	p := loaderPlan{mem: m}
	for _, capacity := range []int64{tight, 0} {
		dev := device.Meta()
		if err := dev.Alloc.SetCapacity(capacity); err != nil {
			return loaderPlan{}, err
		}
		if _, err = stagingBlocks(dev, m); err == nil {
			p.allocated, p.reserved = dev.Alloc.Stats().ByCategory[device.Input], dev.Alloc.MemoryReserved()
			return p, nil
		}
	}
	return loaderPlan{}, fmt.Errorf("data loader staging: %w", err)
}

// pageSize is the rounding of a segment mapped under a capacity where the
// allocator's regular segment size does not fit.
const pageSize = 4096

// stagingBlocks allocates a loader's staging buffers from dev in the order
// the loader asks for them.
func stagingBlocks(dev *device.Device, m dataset.Memory) ([]*device.Block, error) {
	var blocks []*device.Block
	for range m.Depth {
		for _, a := range []struct {
			what string
			n    int64
		}{{"staging inputs", m.StagingInputs}, {"staging targets", m.StagingTargets}} {
			b, err := dev.Alloc.Allocate(a.n, device.Tag{Category: device.Input, Module: "data", Op: a.what})
			if err != nil {
				for _, b := range blocks {
					dev.Alloc.Free(b)
				}
				return nil, err
			}
			blocks = append(blocks, b)
		}
	}
	return blocks, nil
}

// stagingPool is a loader's staging buffers, allocated from the device
// before the model so that they take the segments the plan gave them; the
// loader takes them (alloc) in the order they were made.
type stagingPool struct {
	dev    *device.Device
	blocks []*device.Block
	next   int
}

// allocStaging allocates lp's staging from dev. On a capped device
// (capped) the capacity is lowered to lp.reserved while it does, so that
// the allocator maps exactly the segments planLoader found, then restored.
func allocStaging(dev *device.Device, lp loaderPlan, capped bool) (*stagingPool, error) {
	if capped {
		old := dev.Alloc.Capacity()
		if err := dev.Alloc.SetCapacity(lp.reserved); err != nil {
			return nil, err
		}
		defer dev.Alloc.SetCapacity(old)
	}
	blocks, err := stagingBlocks(dev, lp.mem)
	if err != nil {
		return nil, fmt.Errorf("data loader staging: %w", err)
	}
	return &stagingPool{dev: dev, blocks: blocks}, nil
}

// alloc is the loader's dataset.AllocFunc: the next buffer of the pool.
// A loader made again (after Close) starts over from the first.
func (p *stagingPool) alloc(what string, bytes int64) ([]byte, func(), error) {
	if p.next == len(p.blocks) {
		p.next = 0
	}
	b := p.blocks[p.next]
	if b.Requested != bytes {
		return nil, nil, fmt.Errorf("staging %s: %d bytes asked, %d planned", what, bytes, b.Requested)
	}
	p.next++
	return b.Data[:bytes:bytes], nil, nil
}

// release gives the staging back to the device.
func (p *stagingPool) release() {
	if p == nil {
		return
	}
	for _, b := range p.blocks {
		p.dev.Alloc.Free(b)
	}
	p.blocks = nil
}

// heap is what the loader holds outside the device: the shuffle state,
// the workers' decode scratch and what the source keeps resident (a table
// read into memory, a token file's mapped pages).
func (p loaderPlan) heap() int64 {
	return p.mem.Shuffle + p.mem.ScratchPerWorker*int64(p.mem.Workers) + p.mem.Source
}

// cost is what the loader takes from the budget: its staging's device
// segments and its Go-heap bytes.
func (p loaderPlan) cost() int64 { return p.reserved + p.heap() }

// row writes the loader's line of the memory plan's table.
func (p loaderPlan) row(w io.Writer) {
	m := p.mem
	fmt.Fprintf(w, "  %-22s %12s   (prefetch depth %d: staging %d x %s from the device as input, %s in %s of segments; shuffle %s, scratch %d x %s and source %s on the heap)\n",
		"data loader (input)", device.FormatBytes(p.cost()), m.Depth, m.Depth, device.FormatBytes(m.StagingBuffer),
		device.FormatBytes(p.allocated), device.FormatBytes(p.reserved), device.FormatBytes(m.Shuffle), m.Workers, device.FormatBytes(m.ScratchPerWorker),
		device.FormatBytes(m.Source))
}

// LoaderTooSmallError says that a budget holds the step or the data
// loader, or neither, but not both, even at the loader's least depth.
type LoaderTooSmallError struct {
	Budget int64
	// Step is the least budget of the step alone (budget.TooSmallError's
	// Minimum); Loader is the loader's cost at depth 1, its minimum.
	Step, Loader int64
	// Err is the planner's error for the step, when it had one.
	Err error
	// Shuffle is a stream's shuffle buffer in records at which Loader
	// was planned (its least under the budget, or the one given); 0 for
	// other data.
	Shuffle int
}

func (e *LoaderTooSmallError) Error() string {
	shuffle := ""
	if e.Shuffle > 0 {
		shuffle = fmt.Sprintf(" with a shuffle buffer of %d records", e.Shuffle)
	}
	return fmt.Sprintf("budget %s is too small for the step and the data loader: the step needs at least %s and the loader %s at prefetch depth 1 (its minimum: one staging buffer, nothing filled ahead)%s; the smallest budget that works is %s",
		device.FormatBytes(e.Budget), device.FormatBytes(e.Step), device.FormatBytes(e.Loader), shuffle, device.FormatBytes(e.Step+e.Loader))
}

// Is makes errors.Is(err, budget.ErrBudget) true.
func (e *LoaderTooSmallError) Is(t error) bool { return t == budget.ErrBudget }

func (e *LoaderTooSmallError) Unwrap() error { return e.Err }

// fitWithLoader plans the step and the data loader together within
// prob.Budget: the loader keeps the deepest prefetch, from maxDepth down
// to 1, that leaves the step room for a plan as fast as with depth 1 (a
// staging buffer is not worth a slower step), and the step is planned in
// the rest of the budget. plan gives the loader at a depth.
func fitWithLoader(ctx context.Context, prob budget.Problem, plan func(depth int) (loaderPlan, error), maxDepth int) (*budget.Result, loaderPlan, error) {
	total := prob.Budget
	need := int64(-1) // the step's least budget, once the planner has said it
	var stepErr error
	fit := func(d int) (*budget.Result, loaderPlan, error) {
		lp, err := plan(d)
		if err != nil || lp.cost() >= total || (need >= 0 && lp.cost()+need > total) {
			return nil, lp, err
		}
		p := prob
		p.Budget = total - lp.cost()
		res, err := budget.Fit(ctx, p)
		var small *budget.TooSmallError
		if errors.As(err, &small) {
			need, stepErr = small.Minimum, err
			return nil, lp, nil
		}
		return res, lp, err
	}
	least, leastPlan, err := fit(1)
	if err != nil {
		return nil, loaderPlan{}, err
	}
	if least == nil {
		if need < 0 {
			// The loader alone took the budget: ask the planner what
			// the step needs, to state the smallest budget for both.
			p := prob
			p.Budget = 1
			var small *budget.TooSmallError
			if _, err := budget.Fit(ctx, p); errors.As(err, &small) {
				need, stepErr = small.Minimum, err
			} else if err != nil {
				return nil, loaderPlan{}, err
			}
		}
		return nil, loaderPlan{}, &LoaderTooSmallError{Budget: total, Step: max(need, 0), Loader: leastPlan.cost(), Err: stepErr}
	}
	for d := maxDepth; d > 1; d-- {
		res, lp, err := fit(d)
		if err != nil {
			return nil, loaderPlan{}, err
		}
		if res != nil && res.Best.Time <= least.Best.Time {
			return res, lp, nil
		}
	}
	return least, leastPlan, nil
}

// planData is plan's --data and --prefetch: the data loader planned with
// the step.
type planData struct {
	path     string
	prefetch int
	shuffle  optInt   // --shuffle-buffer
	md       *mapData // --data, once open
}

func planDataFlags(fs *flag.FlagSet) *planData {
	d := new(planData)
	fs.StringVar(&d.path, "data", "", "plan the data loader over this training data too (an image folder, a .csv/.tsv table, IDX files, WebDataset shards or a token file, as train --data): its staging, shuffle state and scratch appear in the plan and count against --budget")
	fs.IntVar(&d.prefetch, "prefetch", defaultPrefetch, "staging buffers of the --data loader (its prefetch depth); with --budget the most, lowered to fit (at least 1)")
	fs.Var(&d.shuffle, "shuffle-buffer", shuffleBufferHelp)
	return d
}

// check validates the flags before any work.
func (d *planData) check() error {
	if d.prefetch < 1 {
		return fmt.Errorf("plan: --prefetch %d: must be at least 1 (one staging buffer, nothing filled ahead)", d.prefetch)
	}
	if d.shuffle.set && d.path == "" {
		return fmt.Errorf("plan: --shuffle-buffer %d: needs --data (WebDataset shards)", d.shuffle.n)
	}
	if err := d.shuffle.check(); err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	return nil
}

// open opens --data for the model and returns the loader's plan at a
// depth, for batches of batch (nil without --data), as train would make
// the loader.
func (d *planData) open(spec zoo.Spec, batch int) (func(depth int) (loaderPlan, error), error) {
	if d.path == "" {
		return nil, nil
	}
	md, err := openData(d.path, spec)
	if err != nil {
		return nil, fmt.Errorf("plan: --data: %w", err)
	}
	if err := md.setShuffle(d.shuffle); err != nil {
		return nil, fmt.Errorf("plan: --data %s: %w", d.path, err)
	}
	d.md = md
	return func(depth int) (loaderPlan, error) {
		return md.plan(md.len(), dataset.Config{BatchSize: batch, Shuffle: true, Workers: parallel.Threads(), Depth: depth, Transforms: md.transforms})
	}, nil
}

// fit plans the step within the budget prob.Budget, with the loader when
// there is one (plan from open), and prints header and the plan.
func (d *planData) fit(ctx context.Context, w io.Writer, header string, prob budget.Problem, plan func(int) (loaderPlan, error)) (*budget.Result, error) {
	if plan == nil {
		res, err := budget.Fit(ctx, prob)
		if err == nil {
			fmt.Fprint(w, header)
			res.Print(w, prob.Budget)
		}
		return res, err
	}
	var lowered bytes.Buffer // said after the header
	res, lp, err := d.md.fitLoader(ctx, &lowered, prob, plan, d.prefetch, prob.Batch)
	if err != nil {
		return nil, fmt.Errorf("plan: --budget with --data: %w", err)
	}
	fmt.Fprint(w, header)
	w.Write(lowered.Bytes())
	if lp.mem.Depth < d.prefetch {
		fmt.Fprintf(w, "data loader: prefetch depth lowered from %d to %d to fit the budget\n", d.prefetch, lp.mem.Depth)
	}
	fmt.Fprintf(w, "data loader %s of the budget; the step is planned in the remaining %s\n", device.FormatBytes(lp.cost()), device.FormatBytes(prob.Budget-lp.cost()))
	res.Print(w, prob.Budget-lp.cost())
	lp.row(w)
	return res, nil
}
