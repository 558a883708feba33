package zoo_test

import (
	"hash/fnv"
	"math"
	"strings"

	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/tensor"
)

// hashinit: deterministic weights that scripts/reference/zoo_ref.py
// generates bit for bit (see its docstring), so the reference files need
// not carry ResNet-18's 45 MB of weights.

func hashUniform(name string, n int) []float64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	key := h.Sum64()
	out := make([]float64, n)
	for i := range out {
		z := key + uint64(i+1)*0x9E3779B97F4A7C15
		z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
		z = (z ^ z>>27) * 0x94D049BB133111EB
		z ^= z >> 31
		out[i] = float64(z>>40)*(2.0/16777216.0) - 1.0
	}
	return out
}

// hashRole is zoo_ref.py's hash_role: (center, scale) by the tensor's role.
func hashRole(name string, shape tensor.Shape) (center, scale float64) {
	leaf := name[strings.LastIndexByte(name, '.')+1:]
	switch {
	case leaf == "running_mean":
		return 0, 0.1
	case leaf == "running_var":
		return 1, 0.5
	case len(shape) >= 2:
		return 0, 1 / math.Sqrt(float64(shape[1:].NumElements()))
	case leaf == "weight":
		return 1, 0.2
	}
	return 0, 0.1
}

func hashTensor(name string, shape tensor.Shape) *tensor.Tensor {
	c, s := hashRole(name, shape)
	u := hashUniform(name, shape.NumElements())
	v := make([]float32, len(u))
	for i, x := range u {
		v[i] = float32(c + float64(s*x)) // the conversion forbids fusing into an FMA
	}
	return tensor.FromFloat32(shape, v)
}

// hashStateDict returns hashinit values for every float parameter and
// buffer of s, and the store's initial values (zeros) for the others.
func hashStateDict(s *nn.Store) map[string]*tensor.Tensor {
	sd := map[string]*tensor.Tensor{}
	for _, p := range s.Params() {
		if p.DType.IsFloat() {
			sd[p.Name] = hashTensor(p.Name, p.Shape)
		} else {
			sd[p.Name] = tensor.New(p.DType, p.Shape)
		}
	}
	return sd
}
