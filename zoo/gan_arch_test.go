package zoo_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/zoo"
)

// ESRGAN's discriminator and perceptual network join TestParity: one
// training step of a small discriminator (num_feat 4, 128x128) and of the
// full vgg19 features to conv5_4 on 32x32 inputs, from
// scripts/reference/gan_ref.py.
func init() {
	parityCases = append(parityCases,
		parityCase{file: "vggdisc", loss: zoo.L1Loss,
			build: func(b nn.Builder) train.Model {
				return zoo.NewVGGDisc(b, zoo.VGGDiscConfig{InCh: 3, NumFeat: 4, InputSize: 128})
			}},
		parityCase{file: "vgg19_conv54", loss: zoo.L1Loss,
			build: func(b nn.Builder) train.Model { return zoo.NewVGG19Extractor(b, zoo.VGG19Conv54) }},
	)
}

// TestGANArchitectures checks the full-size discriminators (128 and 256
// inputs) and vgg19's features against BasicSR's and torchvision's
// state_dict keys, dtypes, shapes and parameter counts
// (testdata/gan_architectures.json).
func TestGANArchitectures(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "gan_architectures.json"))
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
	builders := map[string]func(nn.Builder){
		"vggdisc128":     func(b nn.Builder) { zoo.NewVGGDisc(b, zoo.DefaultVGGDiscConfig()) },
		"vggdisc256":     func(b nn.Builder) { zoo.NewVGGDisc(b, zoo.VGGDiscConfig{InCh: 3, NumFeat: 64, InputSize: 256}) },
		"vgg19_features": func(b nn.Builder) { zoo.NewVGG19Features(b) },
	}
	if len(archs) != len(builders) {
		t.Fatalf("gan_architectures.json has %d models, the test knows %d", len(archs), len(builders))
	}
	for name, a := range archs {
		t.Run(name, func(t *testing.T) {
			build, ok := builders[name]
			if !ok {
				t.Fatalf("no Go builder for %s", name)
			}
			s := nn.NewStore()
			build(s.Root())
			checkEntries(t, s, parseEntries(t, a.StateDict))
			if got := s.NumParams(); got != a.NumParams {
				t.Fatalf("%d parameters, PyTorch has %d", got, a.NumParams)
			}
		})
	}
}

// The counts independently of the JSON file, and the names VGG19ParamNames
// lists.
func TestGANParameterCounts(t *testing.T) {
	for _, c := range []struct {
		name  string
		build func(nn.Builder)
		want  int64
	}{
		{"vggdisc128", func(b nn.Builder) { zoo.NewVGGDisc(b, zoo.DefaultVGGDiscConfig()) }, 14_499_401},
		{"vgg19_features", func(b nn.Builder) { zoo.NewVGG19Features(b) }, 20_024_384},
	} {
		s := nn.NewStore()
		c.build(s.Root())
		if got := s.NumParams(); got != c.want {
			t.Errorf("%s: %d parameters, want %d", c.name, got, c.want)
		}
	}
	s := nn.NewStore()
	zoo.NewVGG19Features(s.Root())
	names := zoo.VGG19ParamNames()
	if len(names) != len(s.Params()) {
		t.Fatalf("VGG19ParamNames has %d names, the store %d", len(names), len(s.Params()))
	}
	for i, p := range s.Params() {
		if p.Name != names[i] {
			t.Errorf("name %d: %s, VGG19ParamNames says %s", i, p.Name, names[i])
		}
	}
}

// A discriminator refuses inputs of another size with a shape error that
// names it, as BasicSR's assertion does.
func TestVGGDiscInputSize(t *testing.T) {
	for _, c := range []struct {
		shape tensor.Shape
		ok    bool
	}{
		{tensor.Shape{2, 3, 128, 128}, true},
		{tensor.Shape{2, 3, 64, 64}, false},
		{tensor.Shape{2, 3, 128, 96}, false},
	} {
		s := nn.NewStore()
		d := zoo.NewVGGDisc(s.Root(), zoo.VGGDiscConfig{InCh: 3, NumFeat: 4, InputSize: 128})
		g := trace.New()
		var out *trace.Tensor
		err := trace.Capture(func() { out = d.Forward(g.Input("x", tensor.Float32, c.shape)) })
		var se *trace.ShapeError
		switch {
		case c.ok && (err != nil || !out.Shape().Equal(tensor.Shape{2, 1})):
			t.Errorf("%v: %v, output %v", c.shape, err, out)
		case !c.ok && !errors.As(err, &se):
			t.Errorf("%v: error %v, want a *trace.ShapeError", c.shape, err)
		case !c.ok && !strings.Contains(err.Error(), "[N, 3, 128, 128]"):
			t.Errorf("%v: %v does not say the expected shape", c.shape, err)
		}
	}
}
