package cpu

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/trace"
)

// kernelGaps reports, for samples of every op type, the ops whose kernel
// need (prim.Kernel) the registered kernels contradict, the elementwise ops
// fused programs cannot run, and the kernels registered for types that are
// no registered op.
func kernelGaps(samples []prim.Primitive, kernels map[reflect.Type]Kernel) []string {
	var gaps []string
	known := map[reflect.Type]bool{}
	for _, p := range samples {
		known[reflect.TypeOf(p)] = true
		t := p.Traits()
		_, has := kernels[reflect.TypeOf(p)]
		switch {
		case t.Kernel == prim.KernelRequired && !has:
			gaps = append(gaps, fmt.Sprintf("%T (%s) has no cpu kernel", p, p.Name()))
		case t.Kernel == prim.KernelNone && has:
			gaps = append(gaps, fmt.Sprintf("%T (%s) declares prim.KernelNone but has a cpu kernel", p, p.Name()))
		case t.Kernel != prim.KernelRequired && t.Kernel != prim.KernelNone:
			gaps = append(gaps, fmt.Sprintf("%T (%s) declares no kernel need", p, p.Name()))
		}
		if t.Fusion == prim.FuseElementwise && !fusable(p) {
			gaps = append(gaps, fmt.Sprintf("%T (%s) is prim.FuseElementwise but fusedInstr cannot run it", p, p.Name()))
		}
	}
	for ty := range kernels {
		if !known[ty] {
			gaps = append(gaps, fmt.Sprintf("a cpu kernel is registered for %v, which prim.All does not list", ty))
		}
	}
	sort.Strings(gaps)
	return gaps
}

// fusable reports whether fused programs have an instruction for o.
func fusable(o trace.Op) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return fusedInstr[float32](o) != nil && fusedInstr[float64](o) != nil
}

// TestRegistryKernels: every registered op has a cpu kernel unless it says
// it needs none, and every cpu kernel is for a registered op.
func TestRegistryKernels(t *testing.T) {
	if len(prim.All()) == 0 {
		t.Fatal("op.All is empty")
	}
	for _, g := range kernelGaps(prim.All(), kernels) {
		t.Error(g)
	}
}

// missingOp is a registered-looking op with no kernel.
type missingOp struct{ kernel prim.Kernel }

func (o *missingOp) Name() string                                { return "missing" }
func (o *missingOp) Infer(in []trace.Meta) ([]trace.Meta, error) { return in, nil }
func (o *missingOp) Cost(in, out []trace.Meta) prim.Cost         { return prim.Cost{} }
func (o *missingOp) InPlaceInputs(in []trace.Meta) []int         { return nil }
func (o *missingOp) Traits() prim.Traits {
	return prim.Traits{Autocast: prim.AutocastPromote, Fusion: prim.FuseElementwise, Stats: prim.StatsNone,
		Recompute: prim.RecomputeExpensive, Kernel: o.kernel}
}

// TestRegistryKernelsReportGaps: an op without a kernel (or a fused
// instruction), a kernel-less op that has one, and a kernel for an
// unlisted type are all reported.
func TestRegistryKernelsReportGaps(t *testing.T) {
	ks := map[reflect.Type]Kernel{}
	for k, v := range kernels {
		ks[k] = v
	}
	samples := append(prim.All(), &missingOp{kernel: prim.KernelRequired})
	gaps := strings.Join(kernelGaps(samples, ks), "\n")
	for _, want := range []string{"*cpu.missingOp (missing) has no cpu kernel", "*cpu.missingOp (missing) is prim.FuseElementwise"} {
		if !strings.Contains(gaps, want) {
			t.Errorf("gaps %q do not report %q", gaps, want)
		}
	}
	ks[reflect.TypeOf(&missingOp{})] = nil
	gaps = strings.Join(kernelGaps(append(prim.All(), &missingOp{kernel: prim.KernelNone}), ks), "\n")
	if !strings.Contains(gaps, "declares prim.KernelNone but has a cpu kernel") {
		t.Errorf("gaps %q do not report a kernel for a KernelNone op", gaps)
	}
	if gaps = strings.Join(kernelGaps(prim.All(), ks), "\n"); !strings.Contains(gaps, "which prim.All does not list") {
		t.Errorf("gaps %q do not report a kernel for an unlisted type", gaps)
	}
}
