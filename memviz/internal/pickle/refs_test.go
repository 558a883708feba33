package pickle

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Decoding with the memo slots ScanMemo found read back gives what
// decoding with every slot gives, on every pickle of testdata (Python's
// of protocols 0 to 5 and this package's).
func TestScanMemoDecodesTheSame(t *testing.T) {
	files, err := filepath.Glob("testdata/*.pickle")
	if err != nil || len(files) == 0 {
		t.Fatalf("no pickles in testdata: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			want, err := Unmarshal(data, nil)
			if err != nil {
				t.Fatal(err)
			}
			refs, ok := ScanMemo(bytes.NewReader(data))
			if !ok {
				t.Fatal("ScanMemo refused a pickle Python wrote")
			}
			if refs.Len() > refs.Slots() {
				t.Errorf("%d slots read back of %d stored", refs.Len(), refs.Slots())
			}
			got, err := Unmarshal(data, &Options{Refs: refs})
			if err != nil {
				t.Fatal(err)
			}
			if d := diff(got, want); d != "" {
				t.Error(d)
			}
		})
	}
}

// Only the slots read back count: a list of 3000 dicts sharing one str
// key stores 3001 slots (every dict, and the key) and reads back one.
func TestScanMemoCounts(t *testing.T) {
	l := make([]any, 3000)
	for i := range l {
		l[i] = DictOf("action", int64(i))
	}
	data, err := Marshal(l, 4)
	if err != nil {
		t.Fatal(err)
	}
	refs, ok := ScanMemo(bytes.NewReader(data))
	if !ok {
		t.Fatal("refused")
	}
	// the list, 3000 dicts, the key
	if refs.Slots() != 3002 || refs.Len() != 1 {
		t.Errorf("%d slots, %d read back; want 3002 and 1", refs.Slots(), refs.Len())
	}
	got, err := Unmarshal(data, &Options{Refs: refs})
	if err != nil {
		t.Fatal(err)
	}
	if d := diff(got, l); d != "" {
		t.Error(d)
	}
}

// What the scan cannot follow, or a memo that cannot be kept in part, is
// refused (the pickle is then decoded with every slot); Refs of another
// pickle makes a read of a slot it did not keep an error.
func TestScanMemoRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		data string
	}{
		{"empty", ""},
		{"no STOP", "\x80\x04N"},
		{"unknown opcode", "\x80\x04\xff."},
		{"truncated string", "\x80\x04X\x10\x00\x00\x00ab"},
		{"slot stored twice", "\x80\x04N\x94N\x94q\x00."},
		{"slot far ahead", "\x80\x04Nr\x00\x00\x01\x00."},
		{"get far ahead", "\x80\x04j\x00\x00\x01\x00."},
		{"bad text index", "(p-1\n."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if refs, ok := ScanMemo(bytes.NewReader([]byte(tc.data))); ok {
				t.Errorf("accepted, %d slots", refs.Slots())
			}
		})
	}
	// slot 0 stored and read back in one, stored only in the other
	reads, ok := ScanMemo(bytes.NewReader([]byte("\x80\x04N\x94h\x00\x86.")))
	if !ok {
		t.Fatal("refused")
	}
	if v, err := Unmarshal([]byte("\x80\x04N\x94h\x00\x86."), &Options{Refs: reads}); err != nil || diff(v, Tuple{nil, nil}) != "" {
		t.Errorf("got %v, %v", v, err)
	}
	other, ok := ScanMemo(bytes.NewReader([]byte("\x80\x04N\x94.")))
	if !ok {
		t.Fatal("refused")
	}
	_, err := Unmarshal([]byte("\x80\x04N\x94h\x00\x86."), &Options{Refs: other})
	if !errors.Is(err, ErrMemo) {
		t.Errorf("got %v, want ErrMemo", err)
	}
	// a slot read but never stored is named by its number in the pickle
	unset := []byte("\x80\x04N\x94h\x00N\x94h\x05.")
	refs, ok := ScanMemo(bytes.NewReader(unset))
	if !ok {
		t.Fatal("refused")
	}
	_, plain := Unmarshal(unset, nil)
	_, err = Unmarshal(unset, &Options{Refs: refs})
	if !errors.Is(err, ErrMemo) || plain == nil || err.Error() != plain.Error() {
		t.Errorf("with Refs %v; without %v", err, plain)
	}
}

// With Refs, Replace releases nothing: an entry read back (shared between
// two lists) is replaced in both, where without Refs the second read is
// an error.
func TestReplaceWithRefs(t *testing.T) {
	shared := DictOf("action", "alloc", "frames", []any{DictOf("name", "f")})
	v := []any{[]any{shared}, []any{shared}}
	data, err := Marshal(v, 4)
	if err != nil {
		t.Fatal(err)
	}
	replace := func(d *Dict) (any, bool) {
		fv, _ := d.Get("frames")
		fl, ok := fv.([]any)
		return fmt.Sprintf("e/%d", len(fl)), ok
	}
	refs, ok := ScanMemo(bytes.NewReader(data))
	if !ok {
		t.Fatal("refused")
	}
	got, err := Unmarshal(data, &Options{Replace: replace, ReplaceKey: "action", Refs: refs})
	if err != nil {
		t.Fatal(err)
	}
	if d := diff(got, []any{[]any{"e/1"}, []any{"e/1"}}); d != "" {
		t.Error(d)
	}
	if _, err := Unmarshal(data, &Options{Replace: replace, ReplaceKey: "action"}); !errors.Is(err, ErrMemo) {
		t.Errorf("without Refs: %v, want ErrMemo", err)
	}
}

// A dict replaced with Refs is reused for the next one only when nothing
// else holds it: a dict DUP put twice in one batch is replaced twice, and
// the dict after it is its own.
func TestReplaceReuse(t *testing.T) {
	entry := func(a string) string { return "}(\x8c\x06action\x8c\x01" + a + "u" }
	for _, tc := range []struct {
		name string
		data string
		want []any
	}{
		{"distinct", "\x80\x04](" + entry("x") + entry("y") + entry("z") + "e.", []any{"x", "y", "z"}},
		{"duplicated", "\x80\x04](" + entry("x") + "2" + entry("y") + "e.", []any{"x", "x", "y"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := []byte(tc.data)
			refs, ok := ScanMemo(bytes.NewReader(data))
			if !ok {
				t.Fatal("refused")
			}
			got, err := Unmarshal(data, &Options{Refs: refs, ReplaceKey: "action", Replace: func(d *Dict) (any, bool) {
				s, err := d.GetString("action")
				return s, err == nil
			}})
			if err != nil {
				t.Fatal(err)
			}
			if d := diff(got, tc.want); d != "" {
				t.Error(d)
			}
		})
	}
}
