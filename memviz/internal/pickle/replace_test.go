package pickle

import (
	"errors"
	"fmt"
	"testing"
)

// Replace turns the dicts holding ReplaceKey into the caller's values as
// they are appended, with their inner lists finished, leaves other values
// alone, and frees the memo slots of what it replaced, so that a later
// reference to one is an error rather than a silent copy.
func TestReplace(t *testing.T) {
	frames := []any{DictOf("name", "f")}
	entry := func(i int) *Dict { return DictOf("action", "alloc", "n", int64(i), "frames", frames) }
	other := DictOf("size", int64(7))
	shared := entry(9)
	replace := func(d *Dict) (any, bool) {
		n, _ := d.Get("n")
		fv, _ := d.Get("frames")
		fl, ok := fv.([]any) // finished: a []any, not the decoder's list
		return fmt.Sprintf("e%d/%d", n, len(fl)), ok
	}
	for _, tc := range []struct {
		name    string
		v       any
		want    any
		wantErr error
	}{
		{"entries", []any{entry(0), other, entry(1)}, []any{"e0/1", other, "e1/1"}, nil},
		{"nested", []any{[]any{entry(2)}, "x"}, []any{[]any{"e2/1"}, "x"}, nil},
		{"not in a list", DictOf("e", entry(3)), DictOf("e", entry(3)), nil},
		{"shared after replacing", []any{[]any{shared}, []any{shared}}, nil, ErrMemo},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := Marshal(tc.v, 4)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Unmarshal(data, &Options{Replace: replace, ReplaceKey: "action"})
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("got %v, %v; want %v", got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := diff(got, tc.want); d != "" {
				t.Error(d)
			}
			// without Replace: the plain values
			plain, err := Unmarshal(data, nil)
			if err != nil {
				t.Fatal(err)
			}
			if d := diff(plain, tc.v); d != "" {
				t.Error(d)
			}
		})
	}
}

// Replace is offered the dicts holding ReplaceKey or any of ReplaceKeys,
// and no other.
func TestReplaceKeys(t *testing.T) {
	v := []any{DictOf("action", "a"), DictOf("state", "s"), DictOf("size", int64(1))}
	data, err := Marshal(v, 4)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Unmarshal(data, &Options{ReplaceKey: "action", ReplaceKeys: []string{"state"},
		Replace: func(d *Dict) (any, bool) { return fmt.Sprint(d.Keys()...), true }})
	if err != nil {
		t.Fatal(err)
	}
	if d := diff(got, []any{"action", "state", DictOf("size", int64(1))}); d != "" {
		t.Error(d)
	}
}
