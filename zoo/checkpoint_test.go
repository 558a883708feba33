package zoo_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/safetensors"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/zoo"
)

func smallRRDBNet(s *nn.Store) *zoo.RRDBNet {
	return zoo.NewRRDBNet(s.Root(), zoo.RRDBNetConfig{InNC: 3, OutNC: 3, NF: 8, NB: 1, GC: 4})
}

func smallGPT(s *nn.Store) *zoo.GPT {
	return zoo.NewGPT(s.Root(), zoo.GPTConfig{NLayer: 2, NHead: 2, NEmbd: 16, BlockSize: 8, VocabSize: 32, Bias: true})
}

func materialize(t *testing.T, s *nn.Store, dev *device.Device) {
	t.Helper()
	if err := s.Materialize(dev, 1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Release)
}

// A checkpoint with a missing or an unexpected key, or a wrong shape, is
// rejected with the keys named, and nothing is loaded.
func TestCheckpointKeysReported(t *testing.T) {
	for _, c := range []struct {
		name   string
		build  func(*nn.Store)
		drop   string
		extra  string
		resize string
	}{
		{"rrdbnet", func(s *nn.Store) { smallRRDBNet(s) }, "RRDB_trunk.0.RDB2.conv3.bias", "RRDB_trunk.1.RDB1.conv1.weight", "HRconv.weight"},
		{"resnet18", func(s *nn.Store) { zoo.ResNet18(s.Root(), 10) }, "layer3.1.bn2.num_batches_tracked", "layer3.0.downsample.2.weight", "fc.weight"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := nn.NewStore()
			c.build(s)
			materialize(t, s, device.Meta())
			sd := hashStateDict(s)
			if err := s.LoadStateDict(sd, true); err != nil {
				t.Fatalf("complete checkpoint: %v", err)
			}
			delete(sd, c.drop)
			sd[c.extra] = tensor.New(tensor.Float32, tensor.Shape{2})
			err := s.LoadStateDict(sd, true)
			var le *nn.LoadError
			if !errors.As(err, &le) {
				t.Fatalf("got %v, want *nn.LoadError", err)
			}
			if len(le.Missing) != 1 || le.Missing[0] != c.drop || len(le.Unexpected) != 1 || le.Unexpected[0] != c.extra {
				t.Errorf("missing %v, unexpected %v; want [%s], [%s]", le.Missing, le.Unexpected, c.drop, c.extra)
			}
			for _, k := range []string{c.drop, c.extra} {
				if !strings.Contains(err.Error(), k) {
					t.Errorf("error %q does not name %s", err, k)
				}
			}
			if err := s.LoadStateDict(sd, false); err != nil {
				t.Errorf("non-strict load: %v", err)
			}

			sd = hashStateDict(s)
			sd[c.resize] = tensor.New(tensor.Float32, tensor.Shape{3, 3})
			err = s.LoadStateDict(sd, false)
			if !errors.As(err, &le) || len(le.Mismatched) != 1 || !strings.HasPrefix(le.Mismatched[0], c.resize+":") {
				t.Errorf("shape mismatch of %s: %v", c.resize, err)
			}
		})
	}
}

// GPT's tied lm_head.weight: written by StateDict, accepted by
// LoadStateDict when equal to transformer.wte.weight, rejected when not;
// the attn.bias masks of PyTorch < 2 checkpoints are ignored.
func TestGPTTiedCheckpoint(t *testing.T) {
	s := nn.NewStore()
	m := smallGPT(s)
	materialize(t, s, device.CPU())
	for _, p := range s.Params() {
		if p.Name == zoo.GPTTiedKey {
			t.Fatalf("the store holds %s separately", zoo.GPTTiedKey)
		}
	}
	sd := hashStateDict(s)
	sd[zoo.GPTTiedKey] = sd[zoo.GPTEmbeddingKey].Clone()
	mask := tensor.New(tensor.Float32, tensor.Shape{1, 1, 8, 8})
	sd["transformer.h.0.attn.bias"] = mask
	sd["transformer.h.1.attn.bias"] = mask
	if err := m.LoadStateDict(sd, true); err != nil {
		t.Fatal(err)
	}

	// Round trip through a file, as PyTorch would write it.
	path := filepath.Join(t.TempDir(), "gpt.safetensors")
	out := m.StateDict()
	if !sameBytes(out[zoo.GPTTiedKey], sd[zoo.GPTEmbeddingKey]) || !sameBytes(out[zoo.GPTEmbeddingKey], sd[zoo.GPTEmbeddingKey]) {
		t.Fatal("StateDict does not carry the tied weight under both keys")
	}
	if len(out) != len(s.Params())+1 {
		t.Errorf("StateDict has %d keys, want %d", len(out), len(s.Params())+1)
	}
	if err := safetensors.WriteFile(path, out, nil); err != nil {
		t.Fatal(err)
	}
	back, err := safetensors.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	s2 := nn.NewStore()
	m2 := smallGPT(s2)
	materialize(t, s2, device.CPU())
	if err := zoo.LoadStateDict(m2, s2, back, true); err != nil {
		t.Fatal(err)
	}
	for k, v := range s2.StateDict() {
		if !sameBytes(v, sd[k]) {
			t.Errorf("%s changed in the round trip", k)
		}
	}

	// Only lm_head.weight: it is the embedding.
	only := hashStateDict(s)
	only[zoo.GPTTiedKey] = only[zoo.GPTEmbeddingKey]
	delete(only, zoo.GPTEmbeddingKey)
	if err := m.LoadStateDict(only, true); err != nil {
		t.Errorf("checkpoint with lm_head.weight only: %v", err)
	}

	// Untied weights cannot be represented.
	bad := hashStateDict(s)
	bad[zoo.GPTTiedKey] = bad[zoo.GPTEmbeddingKey].Clone()
	bad[zoo.GPTTiedKey].F32()[5] += 1
	if err := m.LoadStateDict(bad, true); err == nil || !strings.Contains(err.Error(), zoo.GPTTiedKey) {
		t.Errorf("untied checkpoint: %v", err)
	}

	// Missing and unexpected keys are still reported by name.
	miss := hashStateDict(s)
	delete(miss, "transformer.h.1.mlp.c_fc.bias")
	miss["transformer.h.2.ln_1.weight"] = tensor.New(tensor.Float32, tensor.Shape{16})
	err = m.LoadStateDict(miss, true)
	if err == nil || !strings.Contains(err.Error(), "transformer.h.1.mlp.c_fc.bias") || !strings.Contains(err.Error(), "transformer.h.2.ln_1.weight") {
		t.Errorf("missing/unexpected keys: %v", err)
	}
}

func sameBytes(a, b *tensor.Tensor) bool {
	if a == nil || b == nil || a.DType != b.DType || !a.Shape.Equal(b.Shape) {
		return false
	}
	return string(a.Data) == string(b.Data)
}
