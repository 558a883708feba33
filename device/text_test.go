package device

import (
	"encoding/json"
	"testing"
)

func TestCategoryJSON(t *testing.T) {
	for _, c := range Categories() {
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatalf("%v: %v", c, err)
		}
		if want := `"` + c.String() + `"`; string(b) != want {
			t.Errorf("%v marshals as %s, want %s", c, b, want)
		}
		var back Category
		if err := json.Unmarshal(b, &back); err != nil || back != c {
			t.Errorf("round trip of %s = %v, %v", b, back, err)
		}
	}
	if _, err := json.Marshal(numCategories); err == nil {
		t.Error("an unnamed category marshalled")
	}
	var c Category
	if err := json.Unmarshal([]byte(`"weights"`), &c); err == nil {
		t.Error(`"weights" accepted`)
	}
}
