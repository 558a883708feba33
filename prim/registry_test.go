package prim

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
)

// opTypes lists the types declared in the Go files of dir (tests excluded)
// that have a Name() method: the op types, whatever registers them.
func opTypes(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || fd.Name.Name != "Name" || len(fd.Recv.List) != 1 {
				continue
			}
			rt := fd.Recv.List[0].Type
			if s, ok := rt.(*ast.StarExpr); ok {
				rt = s.X
			}
			if id, ok := rt.(*ast.Ident); ok {
				types = append(types, id.Name)
			}
		}
	}
	sort.Strings(types)
	return types
}

// registryGaps reports the op types of types that no sample registers, and
// what Check finds wrong with each sample.
func registryGaps(types []string, samples []Primitive) []string {
	registered := map[string]bool{}
	var gaps []string
	for _, p := range samples {
		registered[reflect.TypeOf(p).Elem().Name()] = true
		if err := Check(p); err != nil {
			gaps = append(gaps, err.Error())
		}
	}
	for _, ty := range types {
		if !registered[ty] {
			gaps = append(gaps, "op type "+ty+" is not registered (prim.register in its file) and declares no traits")
		}
	}
	return gaps
}

// TestRegistry: every op type of the package is registered, and every
// sample declares every trait consistently.
func TestRegistry(t *testing.T) {
	types := opTypes(t, ".")
	if len(types) < 40 {
		t.Fatalf("found only %d op types: %v", len(types), types)
	}
	for _, g := range registryGaps(types, All()) {
		t.Error(g)
	}
}

// TestRegistryReportsUnregistered: an op type added without registering
// its traits fails the registry test.
func TestRegistryReportsUnregistered(t *testing.T) {
	dir := t.TempDir()
	src := "package prim\n\ntype Phantom struct{}\n\nfunc (o *Phantom) Name() string { return \"phantom\" }\n"
	if err := os.WriteFile(filepath.Join(dir, "phantom.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	before := registryGaps(opTypes(t, "."), All())
	after := registryGaps(append(opTypes(t, "."), opTypes(t, dir)...), All())
	if len(after) != len(before)+1 || !strings.Contains(strings.Join(after, "\n"), "Phantom") {
		t.Fatalf("gaps = %q, want one more naming Phantom", after)
	}
}

// partial is an op whose traits are whatever the test says.
type partial struct {
	traits Traits
	effect bool
}

func (o *partial) Name() string                                { return "partial" }
func (o *partial) Infer(in []trace.Meta) ([]trace.Meta, error) { return in, nil }
func (o *partial) Traits() Traits                              { return o.traits }
func (o *partial) Cost(in, out []trace.Meta) Cost              { return elementwiseCost(in, out) }
func (o *partial) InPlaceInputs(in []trace.Meta) []int         { return nil }

type partialEffect struct{ partial }

func (o *partialEffect) Effect() {}

type partialAlias struct{ partial }

func (o *partialAlias) AliasOf() int { return 0 }

// TestCheckReportsMissingTrait: leaving out any trait, or declaring one
// that contradicts the op's interfaces, is reported.
func TestCheckReportsMissingTrait(t *testing.T) {
	full := Traits{Autocast: AutocastPromote, Fusion: FuseNone, Stats: StatsNone, Recompute: RecomputeExpensive, Kernel: KernelRequired}
	with := func(f func(*Traits)) Traits { tr := full; f(&tr); return tr }
	for _, c := range []struct {
		name string
		op   Primitive
		want string // "" for no error
	}{
		{"complete", &partial{traits: full}, ""},
		{"no autocast class", &partial{traits: with(func(t *Traits) { t.Autocast = 0 })}, "autocast"},
		{"no fusion role", &partial{traits: with(func(t *Traits) { t.Fusion = 0 })}, "fusion"},
		{"no statistics", &partial{traits: with(func(t *Traits) { t.Stats = 0 })}, "statistic"},
		{"no recompute class", &partial{traits: with(func(t *Traits) { t.Recompute = 0 })}, "recompute"},
		{"no kernel need", &partial{traits: with(func(t *Traits) { t.Kernel = 0 })}, "kernel"},
		{"out of range", &partial{traits: with(func(t *Traits) { t.Fusion = 9 })}, "fusion"},
		{"GradOf of a promote op", &partial{traits: with(func(t *Traits) { t.GradOf = 1 })}, "GradOf"},
		{"GradOf of a float32 op", &partial{traits: with(func(t *Traits) { t.GradOf, t.Autocast = 1, AutocastFP32 })}, ""},
		{"effect recomputed", &partialEffect{partial{traits: full}}, "RecomputeNever"},
		{"effect", &partialEffect{partial{traits: with(func(t *Traits) { t.Recompute = RecomputeNever })}}, ""},
		{"never but no effect", &partial{traits: with(func(t *Traits) { t.Recompute = RecomputeNever })}, "RecomputeNever"},
		{"alias with a kernel", &partialAlias{partial{traits: full}}, "KernelNone"},
	} {
		err := Check(c.op)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: Check = %v, want an error about %s", c.name, err, c.want)
		}
	}
}

// TestOfPanicsWithoutTraits: a pass asking an op without traits fails
// loudly instead of assuming a default.
func TestOfPanicsWithoutTraits(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "declares no traits") {
			t.Fatalf("recovered %v", r)
		}
	}()
	Of(bare{})
}

type bare struct{}

func (bare) Name() string                                { return "bare" }
func (bare) Infer(in []trace.Meta) ([]trace.Meta, error) { return in, nil }

// TestCost checks the cost of ops with their own formulas against
// hand-computed numbers.
func TestCost(t *testing.T) {
	f32 := func(s ...int) trace.Meta { return trace.Meta{DType: tensor.Float32, Shape: tensor.Shape(s)} }
	bf16 := func(s ...int) trace.Meta { return trace.Meta{DType: tensor.BFloat16, Shape: tensor.Shape(s)} }
	for _, c := range []struct {
		name string
		op   Primitive
		in   []trace.Meta
		want Cost
	}{
		// [2, 3, 4] x [4, 5]: 2*3*5 outputs of 4 multiply-adds.
		{"matmul", &MatMul{}, []trace.Meta{f32(2, 3, 4), f32(4, 5)}, Cost{Flops: 2 * 2 * 3 * 4 * 5, Bytes: 4 * (24 + 20 + 30)}},
		{"matmul mismatch", &MatMul{}, []trace.Meta{f32(3, 4), f32(5, 6)}, Cost{Bytes: 4 * (12 + 30 + 18)}},
		// [1, 2, 5, 5] with [3, 2, 3, 3] (no padding): [1, 3, 3, 3] outputs of 18 multiply-adds.
		{"conv2d", &Conv2dOp{Opts: ConvOpts{Stride: [2]int{1, 1}, Dilation: [2]int{1, 1}, Groups: 1}}, []trace.Meta{f32(1, 2, 5, 5), f32(3, 2, 3, 3)},
			Cost{Flops: 2 * 27 * 18, Bytes: 4 * (50 + 54 + 27)}},
		{"relu", &Unary{Kind: ReLUKind}, []trace.Meta{f32(6)}, Cost{Flops: 12, Bytes: 48}},
		{"cast to bf16", &Cast{To: tensor.BFloat16}, []trace.Meta{f32(8)}, Cost{Flops: 16, Bytes: 32 + 16, Convert: 1, Format: tensor.BFloat16}},
		{"cast from bf16", &Cast{To: tensor.Float32}, []trace.Meta{bf16(8)}, Cost{Flops: 16, Bytes: 16 + 32, Convert: 0.6, Format: tensor.BFloat16}},
		{"round to fp16", &Round{To: tensor.Float16}, []trace.Meta{f32(8)}, Cost{Flops: 16, Bytes: 64, Convert: 1, Format: tensor.Float16}},
		{"cast f32", &Cast{To: tensor.Float32}, []trace.Meta{f32(8)}, Cost{Flops: 16, Bytes: 64}},
		// Quantize reads its input twice.
		{"quantize", &Quantize{Axis: 0}, []trace.Meta{f32(2, 4)}, Cost{Flops: 2 * (8 + 2), Bytes: 2*32 + 8 + 8, Convert: 3}},
	} {
		out, err := c.op.Infer(c.in)
		if err != nil && c.name != "matmul mismatch" {
			t.Fatalf("%s: %v", c.name, err)
		}
		if c.name == "matmul mismatch" {
			out = []trace.Meta{f32(3, 6)}
		}
		if got := c.op.Cost(c.in, out); got != c.want {
			t.Errorf("%s: cost %+v, want %+v", c.name, got, c.want)
		}
	}
}
