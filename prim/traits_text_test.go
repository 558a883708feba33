package prim_test

import (
	"encoding/json"
	"testing"

	"github.com/headroom-ml/headroom/prim"
)

// Every registered op's traits survive JSON, by name.
func TestTraitsJSON(t *testing.T) {
	for _, p := range prim.All() {
		tr := p.Traits()
		b, err := json.Marshal(tr)
		if err != nil {
			t.Fatalf("%s: %v", p.Name(), err)
		}
		var back prim.Traits
		if err := json.Unmarshal(b, &back); err != nil || back != tr {
			t.Fatalf("%s: %s read back as %+v, %v", p.Name(), b, back, err)
		}
	}
	b, _ := json.Marshal((&prim.MaskedFillOp{}).Traits())
	if want := `{"Autocast":"promote","GradOf":0,"Fusion":"none","Stats":"none","Recompute":"cheap","Kernel":"required"}`; string(b) != want {
		t.Errorf("marshal = %s, want %s", b, want)
	}
	var tr prim.Traits
	if err := json.Unmarshal([]byte(`{"Fusion":"sometimes"}`), &tr); err == nil {
		t.Error(`Fusion "sometimes" accepted`)
	}
	if _, err := json.Marshal(prim.Traits{Kernel: 9}); err == nil {
		t.Error("Kernel(9) marshalled")
	}
}
