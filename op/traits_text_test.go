package op_test

import (
	"encoding/json"
	"testing"

	"github.com/headroom-ml/headroom/op"
)

// Every registered op's traits survive JSON, by name.
func TestTraitsJSON(t *testing.T) {
	for _, p := range op.All() {
		tr := p.Traits()
		b, err := json.Marshal(tr)
		if err != nil {
			t.Fatalf("%s: %v", p.Name(), err)
		}
		var back op.Traits
		if err := json.Unmarshal(b, &back); err != nil || back != tr {
			t.Fatalf("%s: %s read back as %+v, %v", p.Name(), b, back, err)
		}
	}
	b, _ := json.Marshal((&op.MaskedFillOp{}).Traits())
	if want := `{"Autocast":"promote","GradOf":0,"Fusion":"none","Stats":"none","Recompute":"cheap","Kernel":"required"}`; string(b) != want {
		t.Errorf("marshal = %s, want %s", b, want)
	}
	var tr op.Traits
	if err := json.Unmarshal([]byte(`{"Fusion":"sometimes"}`), &tr); err == nil {
		t.Error(`Fusion "sometimes" accepted`)
	}
	if _, err := json.Marshal(op.Traits{Kernel: 9}); err == nil {
		t.Error("Kernel(9) marshalled")
	}
}
