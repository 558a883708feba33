package transform_test

import (
	"strings"
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/prim"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/trace"
	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/transform"
	"github.com/headroom-ml/headroom/zoo"
)

func TestParseNames(t *testing.T) {
	for _, name := range []string{"none", "bf16", "fp16", "int8", "bits", "offload"} {
		f, err := transform.ParseFormat(name)
		if err != nil || f.String() != name {
			t.Errorf("ParseFormat(%q) = %v, %v", name, f, err)
		}
	}
	for _, name := range transform.Compressions {
		if _, err := transform.ParseCompress(name); err != nil {
			t.Errorf("ParseCompress(%q): %v", name, err)
		}
	}
	_, err := transform.ParseCompress("zip")
	if err == nil || !strings.Contains(err.Error(), "none, masks, bf16, fp16, int8, offload") {
		t.Errorf("ParseCompress(zip): %v", err)
	}
	if _, err := transform.ParseFormat("fp8"); err == nil || !strings.Contains(err.Error(), "bf16") {
		t.Errorf("ParseFormat(fp8): %v", err)
	}
}

func countOps(g *trace.Graph, name string) int {
	k := 0
	for _, n := range g.Nodes {
		if n.Kind != trace.KindOp {
			continue
		}
		if n.Op.Name() == name {
			k++
		}
		// Ops fused into one node (transform.Fuse) still count.
		if f, ok := n.Op.(*prim.Fused); ok {
			if f.Producer != nil && f.Producer.Name() == name {
				k++
			}
			for _, in := range f.Prog {
				if in.Op.Name() == name {
					k++
				}
			}
		}
	}
	return k
}

func sameGrads(t *testing.T, what string, got, want outcome) {
	t.Helper()
	if got.loss != want.loss {
		t.Fatalf("%s: loss %v, uncompressed %v", what, got.loss, want.loss)
	}
	for _, name := range want.names {
		for i, v := range want.grads[name] {
			if got.grads[name][i] != v {
				t.Fatalf("%s: %s[%d] = %v, uncompressed %v", what, name, i, got.grads[name][i], v)
			}
		}
	}
}

// ReLU masks as bits and offloading change memory, never numbers: loss and
// every gradient are bit-identical, with and without recomputation.
func TestLosslessFormatsAreExact(t *testing.T) {
	spec := mustSpec(t, "cnn") // conv -> relu -> max_pool: the ReLU outputs are read only as masks
	base := step(t, spec, 16, setup{})
	host := transform.NewHostPool(device.CPU())
	for _, c := range []struct {
		name string
		s    setup
	}{
		{"masks", setup{compress: transform.Compression{Masks: true}}},
		{"offload", setup{compress: transform.Compression{To: transform.Offload, MinBytes: transform.DefaultMinBytes, Masks: true}, host: host}},
		// Recomputing the fully connected layers reads the saved pooled
		// outputs; the ReLU masks are still bits.
		{"masks+remat", setup{compress: transform.Compression{Masks: true}, remat: transform.Selective{Ops: map[string]bool{"matmul": true}}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := step(t, spec, 16, c.s)
			sameGrads(t, c.name, got, base)
			if n := countOps(got.prog, "relu_backward"); n != 1 {
				t.Errorf("%d ReLU backwards read a float output, want 1 (fc1's, whose output fc2's backward also reads)", n)
			}
			if n := countOps(got.prog, "relu_backward_mask"); n != 2 {
				t.Errorf("%d ReLU backwards read bits, want 2", n)
			}
			if got.plan.Activations >= base.plan.Activations {
				t.Errorf("activation peak %d, uncompressed %d", got.plan.Activations, base.plan.Activations)
			}
			t.Logf("activation peak %d -> %d bytes (%.0f%% lower)", base.plan.Activations, got.plan.Activations, 100*(1-float64(got.plan.Activations)/float64(base.plan.Activations)))
		})
	}
	if host.Held() != 0 {
		t.Errorf("host pool still holds %d tensors after the step", host.Held())
	}
	if host.Device.Alloc.MaxMemoryAllocated() == 0 {
		t.Error("nothing was offloaded to the host pool")
	}
}

// RRDBNet's LeakyReLU outputs (slope 0.2) are read by the dense blocks'
// concatenations in the forward pass and, in the backward pass, only for
// their sign: stored as bits, they die after the concatenations, the
// backward reads strict masks, and loss and gradients stay bit-identical.
func TestLeakyReLUMasksAreExact(t *testing.T) {
	spec := zoo.Spec{Name: "rrdbnet-tiny", Loss: zoo.L1Loss,
		New: func(b nn.Builder) train.Model {
			return zoo.NewRRDBNet(b, zoo.RRDBNetConfig{InNC: 3, OutNC: 3, NF: 8, NB: 1, GC: 4})
		},
		Example: func(n int) (trace.Meta, trace.Meta) {
			return trace.Meta{DType: tensor.Float32, Shape: tensor.Shape{n, 3, 8, 8}}, trace.Meta{DType: tensor.Float32, Shape: tensor.Shape{n, 3, 32, 32}}
		}}
	base := step(t, spec, 2, setup{})
	got := step(t, spec, 2, setup{compress: transform.Compression{Masks: true}})
	sameGrads(t, "masks", got, base)
	// One RRDB: 3 dense blocks of 4 LeakyReLU convolutions whose outputs
	// only concatenations read, and the first upsampling convolution's,
	// which only the nearest-neighbour upsampling reads; the second
	// upsampling convolution's and HRconv's outputs feed convolutions,
	// which keep them.
	if n := countOps(got.prog, "leaky_relu_backward_mask"); n != 13 {
		t.Errorf("%d LeakyReLU backwards read bits, want 13", n)
	}
	if n := countOps(got.prog, "leaky_relu_mask_pack"); n != 13 {
		t.Errorf("%d strict masks packed, want 13", n)
	}
	if n := countOps(got.prog, "relu_mask_pack") + countOps(got.prog, "relu_backward_mask"); n != 0 {
		t.Errorf("%d ReLU (NaN-set) mask ops on a LeakyReLU output, want 0", n)
	}
	if got.plan.Activations >= base.plan.Activations {
		t.Errorf("activation peak %d, unmasked %d", got.plan.Activations, base.plan.Activations)
	}
	t.Logf("activation peak %d -> %d bytes", base.plan.Activations, got.plan.Activations)
}

// Lossy formats change gradients by a bounded amount. The bound is 8 units
// of the format's relative error u (bf16 2^-9, fp16 2^-11, int8 1/254 of a
// channel's largest magnitude): each gradient reads a few compressed
// tensors, each off by at most u, and the error propagates through a few
// layers. ReLU masks are exact (read from bits), so no mask flips.
func TestLossyFormatsAreBounded(t *testing.T) {
	for _, model := range []string{"cnn", "mlp"} {
		spec := mustSpec(t, model)
		base := step(t, spec, 16, setup{})
		for _, c := range []struct {
			f transform.Format
			u float64
		}{{transform.BF16, 1.0 / 512}, {transform.FP16, 1.0 / 2048}, {transform.Int8, 1.0 / 254}} {
			got := step(t, spec, 16, setup{compress: transform.Compression{To: c.f, MinBytes: 0, Masks: true}})
			if got.loss != base.loss {
				t.Errorf("%s %v: the forward pass changed: loss %v, uncompressed %v", model, c.f, got.loss, base.loss)
			}
			total, worst, name := relErr(got, base)
			t.Logf("%s %v: gradient relative error %.2g overall, %.2g at worst (%s); bound %.2g", model, c.f, total, worst, name, 8*c.u)
			if worst > 8*c.u {
				t.Errorf("%s %v: gradient of %s off by %.3g relative, more than 8u = %.3g", model, c.f, name, worst, 8*c.u)
			}
			if n := countOps(got.prog, "relu_backward"); n != 0 {
				t.Errorf("%s %v: %d ReLU backwards read a compressed float output instead of bits", model, c.f, n)
			}
		}
	}
}

// Compression lowers the planned activation peak of a conv net (planned on
// the meta device; the cpu runs above check measured == planned).
func TestCompressionSavesMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("plans ResNet-18")
	}
	spec := mustSpec(t, "resnet18")
	const batch = 4
	base := planOnly(t, spec, batch, setup{})
	for _, c := range []struct {
		name string
		s    setup
		min  float64 // lowest acceptable reduction of the activation peak
	}{
		{"bf16", setup{compress: transform.Compression{To: transform.BF16, MinBytes: transform.DefaultMinBytes, Masks: true}}, 0.40},
		{"int8", setup{compress: transform.Compression{To: transform.Int8, MinBytes: transform.DefaultMinBytes, Masks: true}}, 0.55},
		{"offload", setup{compress: transform.Compression{To: transform.Offload, MinBytes: transform.DefaultMinBytes, Masks: true}}, 0.60},
		{"bf16-mixed", setup{precision: transform.BF16Mixed}, 0.30},
	} {
		got := planOnly(t, spec, batch, c.s)
		red := 1 - float64(got.Activations)/float64(base.Activations)
		t.Logf("resnet18 batch %d %-10s activations at peak %6.1f MiB -> %6.1f MiB (%.0f%% lower), total %6.1f -> %6.1f MiB",
			batch, c.name, mib(base.Activations), mib(got.Activations), 100*red, mib(base.Total()), mib(got.Total()))
		if red < c.min {
			t.Errorf("%s: activation peak %.0f%% lower, want at least %.0f%%", c.name, 100*red, 100*c.min)
		}
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// The policies choose per tensor: by op kind, by explicit reference, by
// size; statistics and graph outputs are never compressed by the package's
// policies.
func TestCompressPolicies(t *testing.T) {
	t.Setenv("HEADROOM_FUSE", "0") // Compress works on a step before Fuse
	spec := mustSpec(t, "cnn")
	g := step(t, spec, 4, setup{}).prog
	saved := transform.SavedValues(g)
	if len(saved) == 0 {
		t.Fatal("no saved values")
	}
	var relus, stats int
	var pick *transform.Saved
	for _, s := range saved {
		if s.Producer() == "relu" {
			relus++
		}
		if s.Statistic {
			stats++
		}
		if s.Producer() == "max_pool2d" && s.Value.Index == 0 && pick == nil {
			pick = s
		}
		for _, o := range g.Outputs {
			if o == s.Value {
				t.Errorf("graph output %v listed as saved", o)
			}
		}
	}
	if relus != 3 || stats != 1 {
		t.Fatalf("%d saved ReLU outputs and %d statistics, want 3 and 1 (cross-entropy's logsumexp)", relus, stats)
	}
	_, st, err := transform.Compress(g, transform.CompressOps{"relu": transform.Bits, "cross_entropy": transform.BF16})
	if err != nil {
		t.Fatal(err)
	}
	if st.Tensors[transform.Bits] != 3 || st.MaskedBits != 3 {
		t.Errorf("by op: %v, %d masks", st, st.MaskedBits)
	}
	if st.Before <= st.After {
		t.Errorf("by op: %d -> %d bytes", st.Before, st.After)
	}
	_, st, _ = transform.Compress(g, transform.CompressTensors{{Node: pick.Value.Node.ID, Output: pick.Value.Index}: transform.Int8})
	if st.Tensors[transform.Int8] != 1 || st.Choices[0].Value != pick.Value {
		t.Errorf("explicit: %v", st)
	}
	_, st, _ = transform.Compress(g, transform.Compression{To: transform.BF16})
	if st.Tensors[transform.Keep] != 1+3 { // the logsumexp, and the int64 targets and max-pool indices
		t.Errorf("size threshold 0: %v", st)
	}
	_, st, _ = transform.Compress(g, transform.Compression{To: transform.BF16, MinBytes: 1 << 40})
	if st.Tensors[transform.BF16] != 0 {
		t.Errorf("size threshold 1 TiB: %v", st)
	}
	_, st, _ = transform.Compress(g, transform.CompressFunc(func(s transform.Saved) transform.Format {
		if s.MaskOnly() {
			return transform.Bits
		}
		return transform.Keep
	}))
	if st.Tensors[transform.Bits] != 2 {
		t.Errorf("mask-only: %v", st)
	}
}
