// Package bench runs headroom's standard performance workloads (issue 5):
// training steps of reference models and a square SGEMM, with step time,
// throughput and memory, measured the same way scripts/bench/pytorch_bench.py
// measures PyTorch so that the two can be compared in one run.
//
// Every training workload is a model of the zoo registry (zoo.Lookup) at a
// batch size: the benchmark has no model definitions of its own, and any
// zoo model can be measured (FromZoo).
package bench

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// Workload is one benchmark. Training workloads have a Model (from the zoo
// model ZooModel); the sgemm workload has none and multiplies two
// GEMMSize² matrices instead.
type Workload struct {
	Name        string
	Description string
	// ZooModel is the zoo registry's name of the model ("" for sgemm).
	ZooModel string
	Batch    int
	// Model registers the model's parameters under b.
	Model func(b nn.Builder) train.Model
	Loss  train.LossFunc
	// X and Y are the metadata of one batch of inputs and targets, and
	// Classes the range of integer inputs and targets (the output's last
	// dimension: classes, or a language model's vocabulary).
	X, Y    trace.Meta
	Classes int
	// Inputs returns one batch of random inputs and targets: standard
	// normal floats, integers uniform in [0, Classes).
	Inputs func(r *rand.Rand) (x, y *tensor.Tensor)
}

// GEMMSize is the side of the sgemm workload's matrices; a step of the
// workload is GEMMReps products, and its time is reported per product.
const (
	GEMMSize = 1024
	GEMMReps = 8
)

func randTensor(r *rand.Rand, m trace.Meta, classes int) *tensor.Tensor {
	switch m.DType {
	case tensor.Int64:
		v := make([]int64, m.Shape.NumElements())
		for i := range v {
			v[i] = int64(r.IntN(classes))
		}
		return tensor.FromInt64(m.Shape.Clone(), v)
	default:
		v := make([]float32, m.Shape.NumElements())
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		return tensor.FromFloat32(m.Shape.Clone(), v)
	}
}

// FromZoo is the workload that trains the zoo model named model at batch
// size batch, named name ("" for the model's name).
func FromZoo(name, model string, batch int) (Workload, error) {
	if batch < 1 {
		return Workload{}, fmt.Errorf("bench: batch size %d: want at least 1", batch)
	}
	spec, err := zoo.Lookup(model)
	if err != nil {
		return Workload{}, err
	}
	x, y := spec.Example(batch)
	out, err := zoo.OutputMeta(spec, 1)
	if err != nil {
		return Workload{}, fmt.Errorf("bench: %s: %w", model, err)
	}
	classes := 0
	if len(out.Shape) > 0 {
		classes = out.Shape[len(out.Shape)-1]
	}
	if (x.DType == tensor.Int64 || y.DType == tensor.Int64) && classes < 1 {
		return Workload{}, fmt.Errorf("bench: %s: integer inputs or targets, but no class dimension in the output %v", model, out.Shape)
	}
	if name == "" {
		name = model
	}
	return Workload{
		Name: name, Description: fmt.Sprintf("%s, batch %d (zoo model %s)", spec.Description, batch, model),
		ZooModel: model, Batch: batch, Model: spec.New, Loss: spec.Loss, X: x, Y: y, Classes: classes,
		Inputs: func(r *rand.Rand) (*tensor.Tensor, *tensor.Tensor) {
			return randTensor(r, x, classes), randTensor(r, y, classes)
		},
	}, nil
}

// standard names the standard workloads: the zoo model each trains and
// its batch size, in the order they run.
var standard = []struct {
	name, model string
	batch       int
}{
	{"sgemm", "", 1},
	{"mlp", "mlp-1024", 128},
	{"resnet18", "resnet18-64", 32},
	{"gpt", "gpt-bytes", 8},
	{"rrdbnet", "rrdbnet", 4},
	{"resnet152", "resnet152-128", 8},
}

func sgemmWorkload() Workload {
	return Workload{Name: "sgemm", Description: fmt.Sprintf("float32 matrix product %d×%d×%d (time per product, steps of %d)", GEMMSize, GEMMSize, GEMMSize, GEMMReps), Batch: 1}
}

// Standard returns the standard workloads, in the order they run.
func Standard() []Workload {
	var out []Workload
	for _, s := range standard {
		if s.model == "" {
			out = append(out, sgemmWorkload())
			continue
		}
		w, err := FromZoo(s.name, s.model, s.batch)
		if err != nil {
			panic(err) // the table above names models of the registry; a test checks
		}
		out = append(out, w)
	}
	return out
}

// DefaultBatch is the batch size bench --model uses for a zoo model: that
// of the standard workload that trains it, else 8.
func DefaultBatch(model string) int {
	for _, s := range standard {
		if s.model == model {
			return s.batch
		}
	}
	return 8
}

// Names lists the standard workloads' names in order.
func Names() []string {
	var out []string
	for _, s := range standard {
		out = append(out, s.name)
	}
	return out
}

// Lookup returns the standard workload named name.
func Lookup(name string) (Workload, error) {
	for _, s := range standard {
		if s.name != name {
			continue
		}
		if s.model == "" {
			return sgemmWorkload(), nil
		}
		return FromZoo(s.name, s.model, s.batch)
	}
	return Workload{}, fmt.Errorf("bench: unknown workload %q (valid: %s)", name, strings.Join(Names(), ", "))
}

// LookupChild resolves the workload a child process is asked to measure:
// a standard workload by name, or "zoo:MODEL:BATCH" (ChildName) for any zoo
// model.
func LookupChild(name string) (Workload, error) {
	rest, ok := strings.CutPrefix(name, "zoo:")
	if !ok {
		return Lookup(name)
	}
	model, b, ok := strings.Cut(rest, ":")
	var batch int
	if _, err := fmt.Sscanf(b, "%d", &batch); !ok || err != nil || fmt.Sprint(batch) != b {
		return Workload{}, fmt.Errorf("bench: bad child workload %q (want zoo:MODEL:BATCH)", name)
	}
	return FromZoo("", model, batch)
}

// ChildName is the name under which a child process finds w again
// (LookupChild).
func (w Workload) ChildName() string {
	if s, err := Lookup(w.Name); err == nil && s.ZooModel == w.ZooModel && s.Batch == w.Batch {
		return w.Name
	}
	return fmt.Sprintf("zoo:%s:%d", w.ZooModel, w.Batch)
}

// ParseModels parses bench --model's comma-separated list of zoo models,
// each trained at batch size batch (0: DefaultBatch of the model).
func ParseModels(list string, batch int) ([]Workload, error) {
	var out []Workload
	seen := map[string]bool{}
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" || seen[name] {
			continue
		}
		seen[name] = true
		b := batch
		if b == 0 {
			b = DefaultBatch(name)
		}
		w, err := FromZoo("", name, b)
		if err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("bench: no models in %q", list)
	}
	return out, nil
}

// ParseWorkloads parses a comma-separated list of workload names; "all" (or
// an empty list) selects every standard workload. Names are kept in the
// order given, without duplicates.
func ParseWorkloads(list string) ([]Workload, error) {
	list = strings.TrimSpace(list)
	if list == "" || list == "all" {
		return Standard(), nil
	}
	var out []Workload
	seen := map[string]bool{}
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if name == "all" {
			return nil, fmt.Errorf("bench: \"all\" cannot be combined with other workloads")
		}
		w, err := Lookup(name)
		if err != nil {
			return nil, err
		}
		if !seen[name] {
			seen[name] = true
			out = append(out, w)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("bench: no workloads in %q", list)
	}
	return out, nil
}
