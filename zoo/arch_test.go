package zoo_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/zoo"
)

// archBuilders build the full-size architectures of testdata/architectures.json
// (written by scripts/reference/zoo_ref.py from torchvision, nanoGPT's
// model.py and ESRGAN's RRDBNet_arch.py). Building registers parameters
// only; nothing is allocated.
var archBuilders = map[string]struct {
	build func(nn.Builder)
	tied  []string
}{
	"resnet18":     {build: func(b nn.Builder) { zoo.ResNet18(b, 1000) }},
	"resnet34":     {build: func(b nn.Builder) { zoo.ResNet34(b, 1000) }},
	"resnet50":     {build: func(b nn.Builder) { zoo.ResNet50(b, 1000) }},
	"resnet101":    {build: func(b nn.Builder) { zoo.ResNet101(b, 1000) }},
	"resnet152":    {build: func(b nn.Builder) { zoo.ResNet152(b, 1000) }},
	"resnet18_c10": {build: func(b nn.Builder) { zoo.ResNet18(b, 10) }},
	"gpt2":         {build: func(b nn.Builder) { zoo.NewGPT(b, zoo.GPT2Config()) }, tied: []string{zoo.GPTTiedKey}},
	"gpt2_nobias": {build: func(b nn.Builder) {
		c := zoo.GPT2Config()
		c.Bias = false
		zoo.NewGPT(b, c)
	}, tied: []string{zoo.GPTTiedKey}},
	"rrdbnet": {build: func(b nn.Builder) { zoo.NewRRDBNet(b, zoo.DefaultRRDBNetConfig()) }},
}

// TestArchitectures checks every parameter and buffer name, dtype and
// shape, in state_dict order, and the parameter count against PyTorch.
func TestArchitectures(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "architectures.json"))
	if err != nil {
		t.Fatal(err)
	}
	var archs map[string]struct {
		NumParams int64               `json:"num_params"`
		StateDict [][]json.RawMessage `json:"state_dict"`
	}
	if err := json.Unmarshal(data, &archs); err != nil {
		t.Fatal(err)
	}
	for name, a := range archs {
		t.Run(name, func(t *testing.T) {
			ab, ok := archBuilders[name]
			if !ok {
				t.Fatalf("no Go builder for %s", name)
			}
			s := nn.NewStore()
			ab.build(s.Root())
			checkEntries(t, s, parseEntries(t, a.StateDict), ab.tied...)
			if got := s.NumParams(); got != a.NumParams {
				t.Fatalf("%d parameters, PyTorch has %d", got, a.NumParams)
			}
		})
	}
	if len(archs) != len(archBuilders) {
		t.Errorf("architectures.json has %d models, the test knows %d", len(archs), len(archBuilders))
	}
}

// The counts the brief quotes, independently of the JSON file.
func TestParameterCounts(t *testing.T) {
	for _, c := range []struct {
		name  string
		build func(nn.Builder)
		want  int64
	}{
		{"resnet18", func(b nn.Builder) { zoo.ResNet18(b, 1000) }, 11_689_512},
		{"resnet50", func(b nn.Builder) { zoo.ResNet50(b, 1000) }, 25_557_032},
		{"resnet152", func(b nn.Builder) { zoo.ResNet152(b, 1000) }, 60_192_808},
		{"rrdbnet", func(b nn.Builder) { zoo.NewRRDBNet(b, zoo.DefaultRRDBNetConfig()) }, 16_697_987},
		// nanoGPT's GPT-2 124M (vocabulary 50304): 124,475,904 with wte
		// counted once, as model.parameters() does.
		{"gpt2", func(b nn.Builder) { zoo.NewGPT(b, zoo.GPT2Config()) }, 124_475_904},
	} {
		s := nn.NewStore()
		c.build(s.Root())
		if got := s.NumParams(); got != c.want {
			t.Errorf("%s: %d parameters, want %d", c.name, got, c.want)
		}
	}
}
