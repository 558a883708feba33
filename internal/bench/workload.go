// Package bench runs headroom's standard performance workloads (issue 5):
// training steps of reference models and a square SGEMM, with step time,
// throughput and memory, measured the same way scripts/bench/pytorch_bench.py
// measures PyTorch so that the two can be compared in one run.
package bench

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// Workload is one standard benchmark. Training workloads have a Model; the
// sgemm workload has none and multiplies two GEMMSize² matrices instead.
type Workload struct {
	Name        string
	Description string
	Batch       int
	// Model registers the model's parameters under b.
	Model func(b nn.Builder) train.Model
	Loss  train.LossFunc
	// Inputs returns one batch of random inputs and targets.
	Inputs func(r *rand.Rand) (x, y *tensor.Tensor)
}

// GEMMSize is the side of the sgemm workload's matrices; a step of the
// workload is GEMMReps products, and its time is reported per product.
const (
	GEMMSize = 1024
	GEMMReps = 8
)

// GPTConfig is the gpt workload's model: nanoGPT, 6 layers, width 384, 6
// heads, context 256, vocabulary 256, biases, no dropout.
var GPTConfig = zoo.GPTConfig{NLayer: 6, NHead: 6, NEmbd: 384, BlockSize: 256, VocabSize: 256, Bias: true}

func randImages(r *rand.Rand, shape ...int) *tensor.Tensor {
	s := tensor.Shape(shape)
	v := make([]float32, s.NumElements())
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return tensor.FromFloat32(s, v)
}

func randLabels(r *rand.Rand, classes int, shape ...int) *tensor.Tensor {
	s := tensor.Shape(shape)
	v := make([]int64, s.NumElements())
	for i := range v {
		v[i] = int64(r.IntN(classes))
	}
	return tensor.FromInt64(s, v)
}

func classifier(name, desc string, batch, classes int, model func(nn.Builder) train.Model, shape ...int) Workload {
	return Workload{
		Name: name, Description: desc, Batch: batch, Model: model, Loss: zoo.CrossEntropyLoss,
		Inputs: func(r *rand.Rand) (*tensor.Tensor, *tensor.Tensor) {
			return randImages(r, append([]int{batch}, shape...)...), randLabels(r, classes, batch)
		},
	}
}

// Standard returns the standard workloads, in the order they run.
func Standard() []Workload {
	return []Workload{
		{Name: "sgemm", Description: fmt.Sprintf("float32 matrix product %d×%d×%d (time per product, steps of %d)", GEMMSize, GEMMSize, GEMMSize, GEMMReps), Batch: 1},
		classifier("mlp", "MLP 784-1024-1024-10, batch 128", 128, 10,
			func(b nn.Builder) train.Model { return zoo.NewMLP(b, 784, 1024, 1024, 10) }, 784),
		classifier("resnet18", "ResNet-18, 10 classes, 64×64 images, batch 32", 32, 10,
			func(b nn.Builder) train.Model { return zoo.ResNet18(b, 10) }, 3, 64, 64),
		{
			Name: "gpt", Description: "nanoGPT 6 layers, width 384, 6 heads, context 256, vocabulary 256, batch 8", Batch: 8,
			Model: func(b nn.Builder) train.Model { return zoo.NewGPT(b, GPTConfig) },
			Loss:  zoo.GPTLoss,
			Inputs: func(r *rand.Rand) (*tensor.Tensor, *tensor.Tensor) {
				return randLabels(r, GPTConfig.VocabSize, 8, GPTConfig.BlockSize), randLabels(r, GPTConfig.VocabSize, 8, GPTConfig.BlockSize)
			},
		},
		{
			Name: "rrdbnet", Description: "ESRGAN RRDBNet, 23 blocks, 64 features, 32×32→128×128, L1 loss, batch 4", Batch: 4,
			Model: func(b nn.Builder) train.Model { return zoo.NewRRDBNet(b, zoo.DefaultRRDBNetConfig()) },
			Loss:  zoo.L1Loss,
			Inputs: func(r *rand.Rand) (*tensor.Tensor, *tensor.Tensor) {
				return randImages(r, 4, 3, 32, 32), randImages(r, 4, 3, 128, 128)
			},
		},
		classifier("resnet152", "ResNet-152, 100 classes, 128×128 images, batch 8", 8, 100,
			func(b nn.Builder) train.Model { return zoo.ResNet152(b, 100) }, 3, 128, 128),
	}
}

// Names lists the standard workloads' names in order.
func Names() []string {
	var out []string
	for _, w := range Standard() {
		out = append(out, w.Name)
	}
	return out
}

// Lookup returns the standard workload named name.
func Lookup(name string) (Workload, error) {
	for _, w := range Standard() {
		if w.Name == name {
			return w, nil
		}
	}
	return Workload{}, fmt.Errorf("bench: unknown workload %q (valid: %s)", name, strings.Join(Names(), ", "))
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
