package train_test

import (
	"encoding/json"
	"testing"

	"github.com/headroom-ml/headroom/train"
	"github.com/headroom-ml/headroom/transform"
)

// A Config survives JSON with its enums by name (a service reads its
// training configuration from a file).
func TestConfigJSONRoundTrip(t *testing.T) {
	for _, c := range []train.Config{
		{},
		{Accumulation: 4, Precision: transform.BF16Mixed, Recompute: train.Selective, Storage: transform.Compression{To: transform.Int8, MinBytes: 1 << 20}},
		{Recompute: train.RecomputeOps("relu", "gelu"), Outputs: true},
		{Recompute: train.RecomputeIDs(transform.Nodes{3: true, 17: true}), OptimizerInBackward: true},
		{Recompute: train.Regions, Precision: transform.FP16Mixed},
	} {
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatalf("%v: %v", c, err)
		}
		var back train.Config
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if back != c {
			t.Errorf("%s read back as %v, want %v", b, back, c)
		}
	}
	b, _ := json.Marshal(train.Config{Precision: transform.BF16Mixed, Recompute: train.RecomputeOps("relu")})
	if want := `{"Accumulation":0,"Precision":"bf16-mixed","Recompute":"selective:relu","Storage":{"To":"none","MinBytes":0,"Masks":false},"OptimizerInBackward":false,"Outputs":false}`; string(b) != want {
		t.Errorf("marshal = %s\nwant      %s", b, want)
	}
	for _, bad := range []string{`{"Recompute":"sometimes"}`, `{"Recompute":"nodes:x"}`, `{"Recompute":"regions:1"}`, `{"Precision":"fp8"}`, `{"Storage":{"To":"fp4"}}`} {
		var c train.Config
		if err := json.Unmarshal([]byte(bad), &c); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	if _, err := json.Marshal(train.Config{Recompute: train.MustRecompute(&customPolicy{})}); err == nil {
		t.Error("a custom policy marshalled")
	}
}

type customPolicy struct{ transform.Nodes }
