package zoo_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/nn"
	"github.com/headroom-ml/headroom/tensor"
	"github.com/headroom-ml/headroom/zoo"
)

// Every tensor of the full GPT splits into pieces of the TP rank's shapes
// and joins back to itself; c_attn's pieces take each rank's heads from
// the query, key and value parts alike.
func TestTPShardGatherRoundTrip(t *testing.T) {
	cfg := zoo.GPTConfig{NLayer: 1, NHead: 6, NEmbd: 12, BlockSize: 4, VocabSize: 10, Bias: true}
	full := nn.NewStore()
	zoo.NewGPT(full.Root(), cfg)
	materialize(t, full, device.CPU())
	sd := hashStateDict(full)
	for _, n := range []int{1, 2, 3, 6} {
		ranks := make([]*nn.Store, n)
		for r := range n {
			ranks[r] = nn.NewStore()
			if _, err := zoo.NewTPGPT(ranks[r].Root(), cfg, r, n); err != nil {
				t.Fatal(err)
			}
		}
		for name, v := range sd {
			var pieces = make([]*tensor.Tensor, 0, n)
			for r := range n {
				p, err := zoo.TPShard(name, v, r, n)
				if err != nil {
					t.Fatal(err)
				}
				want, ok := ranks[r].Get(name)
				if !ok || !p.Shape.Equal(want.Shape) {
					t.Fatalf("%d ranks: piece of %s is %v, rank %d's parameter %v", n, name, p.Shape, r, want)
				}
				pieces = append(pieces, p)
			}
			back, err := zoo.TPGather(name, pieces)
			if err != nil {
				t.Fatal(err)
			}
			if !back.Shape.Equal(v.Shape) || !slices.Equal(back.Data, v.Data) {
				t.Errorf("%d ranks: %s does not join back to itself", n, name)
			}
		}
		if len(ranks[0].Params()) != len(full.Params()) {
			t.Errorf("%d ranks: %d tensors, the full model %d", n, len(ranks[0].Params()), len(full.Params()))
		}
	}
	// Query rows of head 1 of 6 on rank 1 of 6: row 2..3 of c_attn.weight.
	w := sd["transformer.h.0.attn.c_attn.weight"]
	p, _ := zoo.TPShard("transformer.h.0.attn.c_attn.weight", w, 1, 6)
	row := 12 * 4
	if !slices.Equal(p.Data[:row], w.Data[2*row:3*row]) || !slices.Equal(p.Data[2*row:3*row], w.Data[(12+2)*row:(12+3)*row]) {
		t.Error("rank 1's c_attn piece does not hold head 1's query and key rows")
	}
	if _, err := zoo.NewTPGPT(nn.NewStore().Root(), cfg, 0, 4); !errors.Is(err, zoo.ErrTensorParallel) {
		t.Errorf("6 heads on 4 ranks: %v", err)
	}
}
