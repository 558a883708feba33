package pickle

// Tests against pickles written by Python, and of the pickles Go writes for
// Python. The files in testdata come from scripts/reference/pickle_ref.py;
// see its documentation. The go_*.pickle files are written by this test:
//
//	go test ./memviz/internal/pickle -run TestGoWritten -update
//	/usr/bin/python3 scripts/reference/pickle_ref.py --check
//
// The second command checks, offline, that Python loads each of them as the
// expected value and that Python's pickle.dumps of what it loaded gives the
// same bytes back.

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/go_*.pickle")

// nestedValue is nested() of scripts/reference/pickle_ref.py as a Go value.
func nestedValue() *Dict {
	i := func(v int64) any { return v }
	sharedList := []any{i(1), i(2), i(3)}
	sharedDict := DictOf("k", "v")
	var deep any = "bottom"
	for k := range 40 {
		deep = []any{int64(k), deep}
	}
	listLong := make([]any, 2500)
	for k := range listLong {
		listLong[k] = int64(k)
	}
	dictLong := NewDict()
	for k := range 1500 {
		dictLong.Set(fmt.Sprintf("k%d", k), int64(k))
	}
	byteRange := make([]byte, 512)
	for k := range byteRange {
		byteRange[k] = byte(k)
	}
	bigStr := make([]byte, 66000)
	bigBytes := make([]byte, 66000)
	for k := range bigStr {
		bigStr[k] = byte('A' + k%26)
		bigBytes[k] = byte(k % 251)
	}
	return DictOf(
		"none", nil,
		"true", true,
		"false", false,
		"ints", []any{i(0), i(1), i(255), i(256), i(65535), i(65536), i(-1), i(-128), i(-129),
			i(math.MaxInt32), i(math.MaxInt32 + 1), i(math.MinInt32), i(math.MinInt32 - 1),
			i(math.MaxInt64), pow2(63, 1, 0), i(math.MinInt64), pow2(63, -1, -1), pow2(64, 1, 0),
			pow2(100, 1, 0), pow2(100, -1, 0), pow2(2100, 1, 0), pow2(2100, -1, 0)},
		"floats", []any{0.0, math.Copysign(0, -1), 1.5, -2.25, 1e300, 5e-324, math.Inf(1), math.Inf(-1), 0.1},
		"strings", []any{"", "a", "h\u00e9llo", "\u65e5\u672c\u8a9e", "emoji \U0001f389", strings.Repeat("x", 300),
			"tab\tnew\nline\\back'q\"dq"},
		"bytes", []any{[]byte{}, []byte{0, 0xff}, byteRange},
		"tuples", []any{Tuple{}, Tuple{i(1)}, Tuple{i(1), i(2)}, Tuple{i(1), i(2), i(3)}, Tuple{i(1), i(2), i(3), i(4)},
			Tuple{Tuple{i(1), Tuple{i(2), Tuple{i(3)}}}}, Tuple{"s", nil, true, 1.5}},
		"list_long", listLong,
		"dict_long", dictLong,
		"dict_int_keys", DictOf(i(1), "one", i(-5), "minus five", pow2(70, 1, 0), "big"),
		"dict_tuple_keys", DictOf(Tuple{i(1), "a"}, []any{i(1)}, Tuple{}, "empty", Tuple{"x", Tuple{"y", i(2)}}, nil),
		"dict_misc_keys", DictOf(nil, "none", 1.5, "float", []byte("key"), "bytes", NewFrozenSet(i(1), i(2)), "frozen"),
		"set", NewSet(i(1), i(2), i(3)),
		"empty_set", NewSet(),
		"frozenset", NewFrozenSet(i(4), i(5)),
		"set_of_tuples", NewSet(Tuple{i(1), i(2)}, Tuple{i(3), i(4)}),
		"shared", []any{sharedList, sharedList, sharedDict, DictOf("again", sharedDict)},
		"empty", []any{[]any{}, NewDict(), Tuple{}},
		"deep", deep,
		"big_str", string(bigStr),
		"big_bytes", bigBytes,
	)
}

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("%v (regenerate with /usr/bin/python3 scripts/reference/pickle_ref.py)", err)
	}
	return data
}

// firstDiff describes where two byte strings first differ.
func firstDiff(got, want []byte) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	return fmt.Sprintf("first difference at offset %d: got %q, want %q (lengths %d, %d)",
		i, got[i:min(i+16, len(got))], want[i:min(i+16, len(want))], len(got), len(want))
}

// TestNestedReference decodes Python's pickles of nested() in protocols 0
// to 5, compares them with nestedValue, and re-encodes them: for protocols 2
// to 5, Go's pickle must be Python's, byte for byte.
func TestNestedReference(t *testing.T) {
	want := nestedValue()
	for proto := 0; proto <= 5; proto++ {
		name := fmt.Sprintf("nested_p%d.pickle", proto)
		t.Run(name, func(t *testing.T) {
			data := readTestdata(t, name)
			got, err := Unmarshal(data, nil)
			if err != nil {
				t.Fatal(err)
			}
			if d := diff(want, got); d != "" {
				t.Fatal(d)
			}
			// shared objects come back shared
			shared, _ := got.(*Dict).GetList("shared")
			l0, l1 := shared[0].([]any), shared[1].([]any)
			if &l0[0] != &l1[0] {
				t.Error("shared list decoded as two lists")
			}
			again, _ := shared[3].(*Dict).GetDict("again")
			if again != shared[2].(*Dict) {
				t.Error("shared dict decoded as two dicts")
			}
			if proto < 2 {
				return
			}
			out, err := Marshal(got, proto)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out, data) {
				t.Errorf("re-encoding differs from Python's pickle: %s", firstDiff(out, data))
			}
		})
	}
}

type refCase struct {
	Name     string `json:"name"`
	Protocol int    `json:"protocol"`
	Hex      string `json:"hex"`
	Reencode bool   `json:"reencode"`
}

// caseValues are the values of cases() in pickle_ref.py.
func caseValues() map[string]any {
	shared := []any{int64(1)}
	return map[string]any{
		"none": nil, "true": true, "false": false,
		"int0": int64(0), "int255": int64(255), "int256": int64(256), "int65536": int64(65536), "neg1": int64(-1),
		"int2_31": int64(1 << 31), "int_min64": int64(math.MinInt64), "int2_64": pow2(64, 1, 0),
		"int_big_neg": pow2(100, -1, 7),
		"float":       1.25, "float_neg_zero": math.Copysign(0, -1), "float_inf": math.Inf(1), "float_tiny": 5e-324,
		"str_empty": "", "str_unicode": "h\u00e9llo \u65e5\u672c \U0001f389", "str_escapes": "a\\b\nc\x00d\u20ac\\u1234",
		"bytes_empty": []byte{}, "bytes": []byte{0, 1, 0xfe, 0xff}, "bytes_ascii": []byte("abc"),
		"bytearray": []byte("\x00ab\xff"), "bytearray_empty": []byte{},
		"tuple0": Tuple{}, "tuple1": Tuple{int64(1)}, "tuple2": Tuple{int64(1), "a"},
		"tuple3": Tuple{int64(1), int64(2), int64(3)}, "tuple5": Tuple{int64(1), int64(2), int64(3), int64(4), int64(5)},
		"list": []any{int64(1), []any{int64(2), []any{int64(3)}}, "x"},
		"dict": DictOf("a", int64(1), "b", []any{int64(2), int64(3)}, "c", DictOf("d", nil)),
		"set":  NewSet(int64(7)), "frozenset": NewFrozenSet(int64(8)), "set_empty": NewSet(),
		"shared": []any{shared, shared, Tuple{shared}},
	}
}

// TestCasesReference decodes small values that Python pickled in every
// protocol, and re-encodes those that Go can represent exactly.
func TestCasesReference(t *testing.T) {
	var file struct {
		Python string    `json:"python"`
		Cases  []refCase `json:"cases"`
	}
	if err := json.Unmarshal(readTestdata(t, "cases.json"), &file); err != nil {
		t.Fatal(err)
	}
	values := caseValues()
	seen := map[string]bool{}
	for _, c := range file.Cases {
		want, ok := values[c.Name]
		if !ok {
			t.Errorf("no Go value for case %q", c.Name)
			continue
		}
		seen[c.Name] = true
		data, err := hex.DecodeString(c.Hex)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Unmarshal(data, nil)
		if err != nil {
			t.Errorf("%s protocol %d: %v", c.Name, c.Protocol, err)
			continue
		}
		if d := diff(want, got); d != "" {
			t.Errorf("%s protocol %d: %s", c.Name, c.Protocol, d)
			continue
		}
		if c.Name == "shared" {
			l := got.([]any)
			if &l[0].([]any)[0] != &l[2].(Tuple)[0].([]any)[0] {
				t.Errorf("shared protocol %d: sharing lost", c.Protocol)
			}
		}
		if !c.Reencode {
			continue
		}
		out, err := Marshal(got, c.Protocol)
		if err != nil {
			t.Errorf("%s protocol %d: %v", c.Name, c.Protocol, err)
		} else if !bytes.Equal(out, data) {
			t.Errorf("%s protocol %d: %s", c.Name, c.Protocol, firstDiff(out, data))
		}
	}
	if len(seen) != len(values) {
		t.Errorf("cases.json has %d of the %d cases", len(seen), len(values))
	}
}

// snapshotSummary is snapshot.json: totals pickle_ref.py computed.
type snapshotSummary struct {
	Segments       int              `json:"segments"`
	Blocks         int              `json:"blocks"`
	Events         int              `json:"events"`
	Actions        map[string]int64 `json:"actions"`
	TotalSize      int64            `json:"total_size"`
	AllocatedSize  int64            `json:"allocated_size"`
	RequestedSize  int64            `json:"requested_size"`
	DistinctFrames int              `json:"distinct_frames"`
	FramesInEvents int              `json:"frames_in_events"`
	MaxAddress     int64            `json:"max_address"`
	LastTimeUS     int64            `json:"last_time_us"`
}

// summarize recomputes snapshot.json from a decoded snapshot, the way a
// reader of PyTorch snapshots walks one: with Dict's typed getters.
func summarize(snap *Dict) (snapshotSummary, error) {
	s := snapshotSummary{Actions: map[string]int64{}}
	frames := map[*Dict]bool{}
	addFrames := func(d *Dict) error {
		fl, err := d.GetList("frames")
		if err != nil {
			return err
		}
		for _, f := range fl {
			fd, ok := f.(*Dict)
			if !ok {
				return fmt.Errorf("frame is a %s", TypeName(f))
			}
			if _, err := fd.GetString("filename"); err != nil {
				return err
			}
			if _, err := fd.GetInt("line"); err != nil {
				return err
			}
			frames[fd] = true
		}
		return nil
	}
	segs, err := snap.GetList("segments")
	if err != nil {
		return s, err
	}
	s.Segments = len(segs)
	for _, sv := range segs {
		seg := sv.(*Dict)
		for key, sum := range map[string]*int64{"total_size": &s.TotalSize, "allocated_size": &s.AllocatedSize, "requested_size": &s.RequestedSize} {
			n, err := seg.GetInt(key)
			if err != nil {
				return s, err
			}
			*sum += n
		}
		addr, err := seg.GetInt("address")
		if err != nil {
			return s, err
		}
		s.MaxAddress = max(s.MaxAddress, addr)
		if err := addFrames(seg); err != nil {
			return s, err
		}
		blocks, err := seg.GetList("blocks")
		if err != nil {
			return s, err
		}
		s.Blocks += len(blocks)
		var allocated int64
		for _, bv := range blocks {
			b := bv.(*Dict)
			state, err := b.GetString("state")
			if err != nil {
				return s, err
			}
			size, err := b.GetInt("size")
			if err != nil {
				return s, err
			}
			if state == "active_allocated" {
				allocated += size
			}
			if err := addFrames(b); err != nil {
				return s, err
			}
		}
		if n, _ := seg.GetInt("allocated_size"); n != allocated {
			return s, fmt.Errorf("segment %#x: allocated_size %d, blocks say %d", addr, n, allocated)
		}
	}
	traces, err := snap.GetList("device_traces")
	if err != nil {
		return s, err
	}
	trace := traces[0].([]any)
	s.Events = len(trace)
	for _, ev := range trace {
		e := ev.(*Dict)
		action, err := e.GetString("action")
		if err != nil {
			return s, err
		}
		s.Actions[action]++
		if s.LastTimeUS, err = e.GetInt("time_us"); err != nil {
			return s, err
		}
		fl, _ := e.GetList("frames")
		s.FramesInEvents += len(fl)
		if err := addFrames(e); err != nil {
			return s, err
		}
	}
	s.DistinctFrames = len(frames)
	return s, nil
}

// TestSnapshotReference reads a memory snapshot shaped like PyTorch's, as
// torch.cuda.memory._dump_snapshot writes it, and checks its totals, its
// sharing, and that Go writes it back byte for byte.
func TestSnapshotReference(t *testing.T) {
	data := readTestdata(t, "snapshot_p4.pickle")
	v, err := Unmarshal(data, nil)
	if err != nil {
		t.Fatal(err)
	}
	snap, ok := v.(*Dict)
	if !ok {
		t.Fatalf("snapshot is a %s", TypeName(v))
	}
	got, err := summarize(snap)
	if err != nil {
		t.Fatal(err)
	}
	var want snapshotSummary
	if err := json.Unmarshal(readTestdata(t, "snapshot.json"), &want); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("summary\n got %+v\nwant %+v", got, want)
	}
	// a block's frames list is the very list of its alloc event
	segs, _ := snap.GetList("segments")
	traces, _ := snap.GetList("device_traces")
	allocFrames := map[int64][]any{}
	for _, ev := range traces[0].([]any) {
		e := ev.(*Dict)
		if a, _ := e.GetString("action"); a == "alloc" {
			addr, _ := e.GetInt("addr")
			allocFrames[addr], _ = e.GetList("frames")
		}
	}
	sharedLists := 0
	for _, sv := range segs {
		blocks, _ := sv.(*Dict).GetList("blocks")
		for _, bv := range blocks {
			b := bv.(*Dict)
			if st, _ := b.GetString("state"); st != "active_allocated" {
				continue
			}
			addr, _ := b.GetInt("address")
			bf, _ := b.GetList("frames")
			ef := allocFrames[addr]
			if cap(bf) > 0 && cap(ef) > 0 && &bf[:1][0] == &ef[:1][0] {
				sharedLists++
			}
		}
	}
	if sharedLists == 0 {
		t.Error("no block shares its frames list with its alloc event")
	}
	pool, _ := segs[0].(*Dict).GetTuple("segment_pool_id")
	if diff(Tuple{int64(0), int64(0)}, pool) != "" {
		t.Errorf("segment_pool_id %v", pool)
	}
	settings, _ := snap.GetDict("allocator_settings")
	if v, ok := settings.Get("PYTORCH_CUDA_ALLOC_CONF"); !ok || v != nil {
		t.Errorf("PYTORCH_CUDA_ALLOC_CONF = %v, %v", v, ok)
	}

	out, err := Marshal(snap, 4)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, data) {
		t.Errorf("re-encoding differs from Python's pickle: %s", firstDiff(out, data))
	}
}

// vizOpcodes are the opcodes the unpickler of PyTorch's memory_viz page
// (torch/utils/viz/MemoryViz.js) understands.
var vizOpcodes = map[byte]bool{
	opPROTO: true, opFRAME: true, opSTOP: true, opMARK: true, opMEMOIZE: true, opBINPUT: true, opLONG_BINPUT: true,
	opBINGET: true, opLONG_BINGET: true, opEMPTY_DICT: true, opEMPTY_LIST: true, opEMPTY_TUPLE: true,
	opTUPLE1: true, opTUPLE2: true, opTUPLE3: true, opTUPLE: true, opLIST: true, opDICT: true, opAPPEND: true,
	opAPPENDS: true, opSETITEM: true, opSETITEMS: true, opSHORT_BINUNICODE: true, opBINUNICODE: true,
	opBININT: true, opBININT1: true, opBININT2: true, opLONG1: true, opBINFLOAT: true, opNEWTRUE: true,
	opNEWFALSE: true, opNONE: true,
}

// TestSnapshotForMemoryViz checks that a snapshot written with protocol 4
// uses only opcodes memory_viz reads.
func TestSnapshotForMemoryViz(t *testing.T) {
	v, err := Unmarshal(readTestdata(t, "snapshot_p4.pickle"), nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Marshal(v, 4)
	if err != nil {
		t.Fatal(err)
	}
	ops, err := disasm(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range ops {
		if !vizOpcodes[op] {
			t.Errorf("opcode %s is not read by memory_viz", opTable[op].name)
		}
	}
	if out[1] != 4 {
		t.Errorf("protocol %d", out[1])
	}
}

// goMapping is go_mapping() of pickle_ref.py, built from Go maps and
// native ints: keys come out sorted.
func goMapping() map[string]any {
	return map[string]any{
		"zeta":  2.5,
		"gamma": nil,
		"alpha": []any{1, "two"},
		"beta":  map[string]any{"nested": true},
	}
}

// TestGoWritten writes (with -update) or checks the pickles Go writes for
// pickle_ref.py --check to verify with Python.
func TestGoWritten(t *testing.T) {
	snap, err := Unmarshal(readTestdata(t, "snapshot_p4.pickle"), nil)
	if err != nil {
		t.Fatal(err)
	}
	files := []struct {
		name  string
		value any
		proto int
	}{
		{"go_nested_p2.pickle", nestedValue(), 2},
		{"go_nested_p3.pickle", nestedValue(), 3},
		{"go_nested_p4.pickle", nestedValue(), 4},
		{"go_nested_p5.pickle", nestedValue(), 5},
		{"go_snapshot_p2.pickle", snap, 2},
		{"go_snapshot_p4.pickle", snap, 4},
		{"go_mapping_p4.pickle", goMapping(), 4},
	}
	for _, f := range files {
		out, err := Marshal(f.value, f.proto)
		if err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		path := filepath.Join("testdata", f.name)
		if *update {
			if err := os.WriteFile(path, out, 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("wrote %s (%d bytes); now run /usr/bin/python3 scripts/reference/pickle_ref.py --check", path, len(out))
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (write it with go test -run TestGoWritten -update)", err)
		}
		if !bytes.Equal(out, want) {
			t.Errorf("%s: Go now writes different bytes (%s); if intended, rerun with -update and check with pickle_ref.py --check", f.name, firstDiff(out, want))
		}
		// and it reads back as what was written
		back, err := Unmarshal(out, nil)
		if err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		if _, ok := f.value.(map[string]any); ok {
			f.value = DictOf("alpha", []any{int64(1), "two"}, "beta", DictOf("nested", true), "gamma", nil, "zeta", 2.5)
		}
		if d := diff(f.value, back); d != "" {
			t.Errorf("%s: %s", f.name, d)
		}
	}
}
