package zoo

import (
	"fmt"
	"strconv"

	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/op"
	"github.com/headroom-ml/headroom/trace"
)

// VGGDiscConfig is the constructor of BasicSR's VGGStyleDiscriminator
// (num_in_ch, num_feat, input_size).
type VGGDiscConfig struct {
	InCh, NumFeat int
	InputSize     int // 128 or 256
}

// DefaultVGGDiscConfig is ESRGAN's discriminator: 3 channels in, 64
// features, 128x128 inputs (14,499,401 parameters).
func DefaultVGGDiscConfig() VGGDiscConfig { return VGGDiscConfig{InCh: 3, NumFeat: 64, InputSize: 128} }

// VGGDisc is BasicSR's VGGStyleDiscriminator with its state_dict names:
// conv0_0 (3x3, bias), then stages k = 0..4 (and 5 for 256x256 inputs) of
// a stride-2 4x4 convolution conv{k}_1 with batch norm bn{k}_1, the stages
// after the first opening with a 3x3 convolution conv{k}_0 and bn{k}_0;
// channels num_feat, 2, 4, 8, 8 times num_feat; every convolution but
// conv0_0 without bias; LeakyReLU(0.2) after each; then linear1
// (num_feat*8*4*4 -> 100), LeakyReLU and linear2 (100 -> 1). Images
// [N, C, S, S] give logits [N, 1].
type VGGDisc struct {
	nn.Module
	Config           VGGDiscConfig
	Conv00           *nn.Conv2d
	Convs            []*nn.Conv2d // conv0_1, conv1_0, conv1_1, ... in forward order
	BNs              []*nn.BatchNorm
	Linear1, Linear2 *nn.Linear
	// Checkpoint records each stage (convolution, batch norm, LeakyReLU)
	// in a checkpoint region, recomputed under the Regions policy.
	Checkpoint bool
}

// NewVGGDisc registers a VGGDisc's parameters under b. It panics on a
// config BasicSR refuses.
func NewVGGDisc(b nn.Builder, cfg VGGDiscConfig) *VGGDisc {
	if cfg.InCh <= 0 || cfg.NumFeat <= 0 || (cfg.InputSize != 128 && cfg.InputSize != 256) {
		panic(fmt.Sprintf("zoo: invalid VGGStyleDiscriminator config %+v (input size 128 or 256)", cfg))
	}
	m := &VGGDisc{Module: nn.NewModule(b), Config: cfg}
	nf := cfg.NumFeat
	m.Conv00 = nn.NewConv2d(b.Sub("conv0_0"), cfg.InCh, nf, 3, op.ConvOpts{Padding: [2]int{1, 1}}, true)
	// Registration order is BasicSR's: conv{k}_0, bn{k}_0, conv{k}_1, bn{k}_1.
	in := nf
	stages := 5
	if cfg.InputSize == 256 {
		stages = 6
	}
	for k := range stages {
		out := nf * min(8, 1<<k)
		s := strconv.Itoa(k)
		if k > 0 {
			m.Convs = append(m.Convs, nn.NewConv2d(b.Sub("conv"+s+"_0"), in, out, 3, op.ConvOpts{Padding: [2]int{1, 1}}, false))
			m.BNs = append(m.BNs, nn.NewBatchNorm2d(b.Sub("bn"+s+"_0"), out))
			in = out
		}
		m.Convs = append(m.Convs, nn.NewConv2d(b.Sub("conv"+s+"_1"), in, out, 4,
			op.ConvOpts{Stride: [2]int{2, 2}, Padding: [2]int{1, 1}}, false))
		m.BNs = append(m.BNs, nn.NewBatchNorm2d(b.Sub("bn"+s+"_1"), out))
		in = out
	}
	m.Linear1 = nn.NewLinear(b.Sub("linear1"), nf*8*4*4, 100, true)
	m.Linear2 = nn.NewLinear(b.Sub("linear2"), 100, 1, true)
	return m
}

// Forward maps images [N, C, S, S] to logits [N, 1].
func (m *VGGDisc) Forward(x *trace.Tensor) *trace.Tensor {
	if s := x.Shape(); len(s) != 4 || s[2] != m.Config.InputSize || s[3] != m.Config.InputSize {
		x.Graph().Errorf("VGGStyleDiscriminator", []*trace.Tensor{x}, "input must be [N, %d, %d, %d]",
			m.Config.InCh, m.Config.InputSize, m.Config.InputSize)
	}
	feat := lrelu(m.Conv00.Forward(x))
	for i, c := range m.Convs {
		stage := func(x *trace.Tensor) *trace.Tensor { return lrelu(m.BNs[i].Forward(c.Forward(x))) }
		if m.Checkpoint {
			feat = nn.Checkpoint(feat, stage)
		} else {
			feat = stage(feat)
		}
	}
	return m.Scope(x, func() *trace.Tensor {
		feat := op.Flatten(feat, 1, -1)
		return m.Linear2.Forward(lrelu(m.Linear1.Forward(feat)))
	})
}
