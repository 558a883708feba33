package transform

import (
	"encoding/json"
	"testing"
)

func TestEnumJSON(t *testing.T) {
	type enum interface {
		String() string
	}
	for _, c := range []struct {
		v    enum
		back func([]byte) (enum, error)
	}{
		{FP32, func(b []byte) (enum, error) { var p Precision; return p, json.Unmarshal(b, &p) }},
		{BF16Mixed, func(b []byte) (enum, error) { var p Precision; err := json.Unmarshal(b, &p); return p, err }},
		{FP16Mixed, func(b []byte) (enum, error) { var p Precision; err := json.Unmarshal(b, &p); return p, err }},
		{BF16True, func(b []byte) (enum, error) { var p Precision; err := json.Unmarshal(b, &p); return p, err }},
		{Keep, func(b []byte) (enum, error) { var f Format; err := json.Unmarshal(b, &f); return f, err }},
		{Int8, func(b []byte) (enum, error) { var f Format; err := json.Unmarshal(b, &f); return f, err }},
		{Offload, func(b []byte) (enum, error) { var f Format; err := json.Unmarshal(b, &f); return f, err }},
	} {
		b, err := json.Marshal(c.v)
		if err != nil {
			t.Fatalf("%v: %v", c.v, err)
		}
		if want := `"` + c.v.String() + `"`; string(b) != want {
			t.Errorf("%v marshals as %s, want %s", c.v, b, want)
		}
		if back, err := c.back(b); err != nil || back != c.v {
			t.Errorf("round trip of %s = %v, %v", b, back, err)
		}
	}
	if _, err := json.Marshal(Precision(9)); err == nil {
		t.Error("Precision(9) marshalled")
	}
	var p Precision
	if err := json.Unmarshal([]byte(`"fp8"`), &p); err == nil {
		t.Error(`"fp8" accepted`)
	}
}
