package pickle

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// fuzzOptions allow a class, persistent ids and a buffer, so that the
// fuzzer reaches every opcode, with limits small enough that each input
// runs fast.
func fuzzOptions() *Options {
	return &Options{
		Allow:          map[string]Constructor{"mod.Cls": Record("mod.Cls"), "collections.OrderedDict": OrderedDict},
		PersistentLoad: func(pid any) (any, error) { return Tuple{"pid", pid}, nil },
		Buffers:        [][]byte{[]byte("buffer")},
		MaxDepth:       200,
		MaxElements:    1 << 16,
		MaxBytes:       1 << 20,
	}
}

// FuzzUnpickle checks that no input makes the decoder panic, hang or
// allocate without bound; that every rejection is an *Error wrapping a
// sentinel; and that what is accepted survives an encode/decode round trip
// when it holds only plain values.
func FuzzUnpickle(f *testing.F) {
	for _, c := range decodeCases() {
		f.Add([]byte(c.in))
	}
	for _, c := range decodeErrorCases() {
		if len(c.in) < 4096 {
			f.Add([]byte(c.in))
		}
	}
	for _, name := range []string{"cases.json", "malicious.json"} {
		var file struct {
			Cases []struct {
				Hex string `json:"hex"`
			} `json:"cases"`
		}
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		if err := json.Unmarshal(data, &file); err != nil {
			f.Fatal(err)
		}
		for _, c := range file.Cases {
			b, err := hex.DecodeString(c.Hex)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	if b, err := os.ReadFile(filepath.Join("testdata", "go_mapping_p4.pickle")); err == nil {
		f.Add(b)
	}
	// Small inputs that would expand: memo slots skipped over by PUTs.
	f.Add(memoHoleFlood(3))
	f.Add(memoHoleFlood(20))

	sentinels := []error{ErrTruncated, ErrOpcode, ErrSyntax, ErrStack, ErrMemo, ErrType, ErrNotAllowed,
		ErrUnsupported, ErrLimit, ErrRecursive, ErrConstructor}
	f.Fuzz(func(t *testing.T, data []byte) {
		// The default limits, proportional to the input, keep every input
		// cheap too; and their errors are *Errors.
		if _, err := Unmarshal(data, nil); err != nil {
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("default options: error %v is a %T, not *Error", err, err)
			}
		}
		v, err := Unmarshal(data, fuzzOptions())
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is a %T, not *Error", err, err)
			}
			if pe.Offset < 0 || pe.Offset > int64(len(data)) {
				t.Fatalf("error %v: offset outside the input (%d bytes)", err, len(data))
			}
			known := false
			for _, s := range sentinels {
				known = known || errors.Is(err, s)
			}
			if !known {
				t.Fatalf("error %v wraps no sentinel", err)
			}
			return
		}
		// keeping only the memo slots read back changes nothing
		if refs, ok := ScanMemo(bytes.NewReader(data)); ok {
			opts := fuzzOptions()
			opts.Refs = refs
			w, err := Unmarshal(data, opts)
			if err != nil {
				t.Fatalf("with Refs: %v\ninput %q", err, data)
			}
			if d := diff(v, w); d != "" {
				t.Fatalf("with Refs: %s\ninput %q", d, data)
			}
		}
		out, err := Marshal(v, 4)
		if err != nil {
			var ee *EncodeError
			if !errors.As(err, &ee) {
				t.Fatalf("encode error %v is a %T", err, err)
			}
			return // a *Object, or a Python 2 str that is not UTF-8
		}
		opts := fuzzOptions()
		opts.MaxElements, opts.MaxBytes = 1<<24, 1<<30 // re-encoding may repeat what the memo shared
		back, err := Unmarshal(out, opts)
		if err != nil {
			t.Fatalf("decoding what was encoded: %v\ninput %q\nencoded %q", err, data, out)
		}
		if d := diff(v, back); d != "" {
			t.Fatalf("round trip: %s\ninput %q\nencoded %q", d, data, out)
		}
	})
}
