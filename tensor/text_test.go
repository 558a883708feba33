package tensor

import (
	"encoding/json"
	"testing"
)

func TestDTypeJSON(t *testing.T) {
	for d := Float32; int(d) < len(dtypeInfo); d++ {
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatalf("%v: %v", d, err)
		}
		if want := `"` + d.String() + `"`; string(b) != want {
			t.Errorf("%v marshals as %s, want %s", d, b, want)
		}
		var back DType
		if err := json.Unmarshal(b, &back); err != nil || back != d {
			t.Errorf("round trip of %s = %v, %v", b, back, err)
		}
	}
	m, err := json.Marshal(map[DType]int{Float32: 1})
	if err != nil || string(m) != `{"float32":1}` {
		t.Errorf("map key: %s, %v", m, err)
	}
	for _, d := range []DType{0, 200} {
		if _, err := json.Marshal(d); err == nil {
			t.Errorf("%v marshalled", d)
		}
	}
	var d DType
	if err := json.Unmarshal([]byte(`"float31"`), &d); err == nil {
		t.Error(`"float31" accepted`)
	}
}
