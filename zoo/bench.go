package zoo

import (
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/train"
)

// The models of `headroom bench`'s standard workloads that no other entry
// of the registry describes. They are registered here, in a file of their
// own, so that the benchmark builds every workload from this registry (and
// `train`, `plan` and `bench --model` accept the same names) while its
// numbers stay comparable with earlier runs: the same widths, vocabulary,
// biases and dropout as before.
func init() {
	specs = append(specs,
		classifier("mlp-1024", "MLP 784-1024-1024-10 on 28x28 images",
			func(b nn.Builder) train.Model { return NewMLP(b, 784, 1024, 1024, 10) }, 1, 28, 28),
		gptSpec("gpt-bytes", "nanoGPT 6 layers, 384 wide, 6 heads, context 256, 256-byte vocabulary, biases, no dropout",
			BenchGPTConfig),
	)
}

// BenchGPTConfig is the model of bench's gpt workload ("gpt-bytes").
var BenchGPTConfig = GPTConfig{NLayer: 6, NHead: 6, NEmbd: 384, BlockSize: 256, VocabSize: 256, Bias: true}
