package pickle

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestRejectsCodeExecution: the classic payloads never get past the opcode
// that names the class, and the error says which class and where.
func TestRejectsCodeExecution(t *testing.T) {
	cases := []struct {
		in, class string
		offset    int64
	}{
		{"cos\nsystem\n(S'echo hi'\ntR.", "os.system", 0},
		{"c__builtin__\neval\n(Vprint(1)\ntR.", "__builtin__.eval", 0},
		{"\x80\x04\x8c\x08builtins\x8c\x04exec\x93\x8c\x05print\x85R.", "builtins.exec", 18},
		{"(S'ls'\nios\nsystem\n.", "os.system", 7},
		{"(dp0\nS'a'\np1\ncsubprocess\nPopen\np2\n(S'ls'\ntRs.", "subprocess.Popen", 13},
		{"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n)R.", "torch._utils._rebuild_tensor_v2", 2},
		{"\x80\x02cbuiltins\ngetattr\n.", "builtins.getattr", 2},
		{"\x80\x02ccopy_reg\n_reconstructor\n.", "copy_reg._reconstructor", 2},
	}
	ran := false
	opts := &Options{Allow: map[string]Constructor{
		// allowed, but not named by any payload: must not run
		"mod.Harmless": func([]any) (any, error) { ran = true; return nil, nil },
	}}
	for _, c := range cases {
		_, err := Unmarshal([]byte(c.in), opts)
		var ce *ClassError
		var pe *Error
		if !errors.Is(err, ErrNotAllowed) || !errors.As(err, &ce) || !errors.As(err, &pe) {
			t.Errorf("%q: error %v, want a class-not-allowed *Error", c.in, err)
			continue
		}
		if got := ce.Module + "." + ce.Name; got != c.class {
			t.Errorf("%q: names class %s, want %s", c.in, got, c.class)
		}
		if pe.Offset != c.offset {
			t.Errorf("%q: offset %d, want %d", c.in, pe.Offset, c.offset)
		}
	}
	if ran {
		t.Error("a constructor ran")
	}
	_, err := Unmarshal([]byte(cases[0].in), nil)
	if want := "pickle: offset 0: class os.system is not allowed"; err == nil || err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
}

// TestPythonMaliciousPickles: what Python's pickler writes for objects whose
// unpickling would run os.system, eval or subprocess, in every protocol.
func TestPythonMaliciousPickles(t *testing.T) {
	var file struct {
		Cases []struct {
			Name     string `json:"name"`
			Protocol int    `json:"protocol"`
			Class    string `json:"class"`
			Hex      string `json:"hex"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(readTestdata(t, "malicious.json"), &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Cases) == 0 {
		t.Fatal("no cases")
	}
	for _, c := range file.Cases {
		data, err := hex.DecodeString(c.Hex)
		if err != nil {
			t.Fatal(err)
		}
		_, err = Unmarshal(data, nil)
		var ce *ClassError
		var pe *Error
		if !errors.As(err, &ce) || !errors.As(err, &pe) {
			t.Errorf("%s protocol %d: error %v, want a *ClassError", c.Name, c.Protocol, err)
			continue
		}
		if name := ce.Module + "." + ce.Name; name != c.Class {
			t.Errorf("%s protocol %d: names %s, want %s", c.Name, c.Protocol, ce.Module+"."+ce.Name, c.Class)
		}
		// the offset is that of the opcode naming the class
		ops, offs, _ := disasmAt(data)
		first := int64(-1)
		for i, op := range ops {
			if op == opGLOBAL || op == opSTACK_GLOBAL || op == opINST {
				first = int64(offs[i])
				break
			}
		}
		if pe.Offset != first {
			t.Errorf("%s protocol %d: offset %d, want %d (%s)", c.Name, c.Protocol, pe.Offset, first, err)
		}
	}
}

// TestAllowedConstructorRunsOnlyWhenAllowed is the positive control: the
// same payload runs the caller's stand-in once it is allowed, and gets
// plain arguments.
func TestAllowedConstructorRunsOnlyWhenAllowed(t *testing.T) {
	var got []any
	opts := &Options{Allow: map[string]Constructor{"os.system": func(args []any) (any, error) {
		got = args
		return "stand-in", nil
	}}}
	v, err := Unmarshal([]byte("cos\nsystem\n(S'echo hi'\ntR."), opts)
	if err != nil || v != "stand-in" {
		t.Fatalf("got %v, %v", v, err)
	}
	if diff([]any{"echo hi"}, got) != "" {
		t.Errorf("args %v", got)
	}
}

// TestHostileShapes: inputs built to exhaust memory or time end quickly,
// with an error or with a compact result.
func TestHostileShapes(t *testing.T) {
	start := time.Now()

	// "billion laughs": 2^60 leaves through shared lists; decoding stays
	// linear because sharing is kept.
	// memo slot i+1 holds (slot i, slot i)
	dag := ""
	for i := range 60 {
		dag += "h" + string(rune(i)) + "h" + string(rune(i)) + "\x86\x940"
	}
	dag += "h<" // slot 60
	v, err := Unmarshal([]byte("]\x94K\x01a0"+dag+"."), nil)
	if err != nil {
		t.Fatalf("shared DAG: %v", err)
	}
	if _, err := Marshal(v, 4); err != nil {
		t.Fatalf("re-encoding the shared DAG: %v", err)
	}

	// the same DAG used as a dict key: hashing it naively takes 2^60
	// steps; hashes of shared tuples are computed once
	v, err = Unmarshal([]byte("}K\x01\x85\x940"+dag+"Ns."), nil)
	if err != nil {
		t.Fatalf("DAG key: %v", err)
	}
	if key := v.(*Dict).Keys()[0]; !v.(*Dict).Has(key) {
		t.Error("DAG key not found again")
	}

	// a huge list handed to a constructor again and again
	big := "cmod\nCls\nq\x00(" + strings.Repeat("K\x01", 5000) + "lq\x01" + strings.Repeat("h\x00h\x01\x85R0", 200) + "N."
	_, err = Unmarshal([]byte(big), &Options{Allow: recordAllow, MaxElements: 100000})
	if !errors.Is(err, ErrLimit) {
		t.Errorf("repeated constructor arguments: %v, want ErrLimit", err)
	}

	// a million marks
	_, err = Unmarshal([]byte(strings.Repeat("(", 1<<20)), &Options{MaxElements: 1000})
	if !errors.Is(err, ErrLimit) {
		t.Errorf("marks: %v, want ErrLimit", err)
	}

	// a long line without a newline
	_, err = Unmarshal([]byte("I"+strings.Repeat("1", 1<<20)), &Options{MaxBytes: 1 << 10})
	if !errors.Is(err, ErrLimit) {
		t.Errorf("long line: %v, want ErrLimit", err)
	}

	// a bytes8 length of 2^62 with ten bytes of data
	_, err = Unmarshal([]byte("\x8e\x00\x00\x00\x00\x00\x00\x00\x400123456789"), &Options{MaxBytes: 1 << 62})
	if !errors.Is(err, ErrTruncated) {
		t.Errorf("huge length: %v, want ErrTruncated", err)
	}

	// a memo index of 2^32-1
	v, err = Unmarshal([]byte("K\x01r\xff\xff\xff\xffj\xff\xff\xff\xff."), nil)
	if err != nil || v != int64(1) {
		t.Errorf("sparse memo: %v, %v", v, err)
	}

	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("hostile inputs took %v", d)
	}
}
