package pickle_test

import (
	"errors"
	"fmt"
	"os"

	"github.com/headroom-ml/headroom/memviz/internal/pickle"
)

// Reading a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot) and
// walking it with Dict's typed getters.
func Example_snapshot() {
	data, err := os.ReadFile("testdata/snapshot_p4.pickle")
	if err != nil {
		fmt.Println(err)
		return
	}
	v, err := pickle.Unmarshal(data, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	snap := v.(*pickle.Dict)
	segments, _ := snap.GetList("segments")
	var reserved int64
	for _, s := range segments {
		size, err := s.(*pickle.Dict).GetInt("total_size")
		if err != nil {
			fmt.Println(err)
			return
		}
		reserved += size
	}
	traces, _ := snap.GetList("device_traces")
	first, _ := traces[0].([]any)[0].(*pickle.Dict).GetString("action")
	fmt.Printf("%d segments, %d bytes reserved; first event: %s\n", len(segments), reserved, first)
	// Output: 26 segments, 723517440 bytes reserved; first event: segment_alloc
}

// A pickle that would run a shell command in Python is an error here.
func ExampleUnmarshal_notAllowed() {
	_, err := pickle.Unmarshal([]byte("cos\nsystem\n(S'echo hi'\ntR."), nil)
	fmt.Println(err)
	var ce *pickle.ClassError
	fmt.Println(errors.Is(err, pickle.ErrNotAllowed), errors.As(err, &ce) && ce.Module == "os")
	// Output:
	// pickle: offset 0: class os.system is not allowed
	// true true
}

// Allowing a class: OrderedDict builds a *Dict, Record keeps what a class
// was called with, and nothing of Python's runs either way.
func ExampleOptions_allow() {
	opts := &pickle.Options{Allow: map[string]pickle.Constructor{
		"collections.OrderedDict": pickle.OrderedDict,
		"torch.Size":              pickle.Record("torch.Size"),
	}}
	// pickle.dumps(OrderedDict(a=1), 2)
	v, err := pickle.Unmarshal([]byte("\x80\x02ccollections\nOrderedDict\nq\x00)Rq\x01X\x01\x00\x00\x00aq\x02K\x01s."), opts)
	fmt.Println(v.(*pickle.Dict).Keys(), err)
	// pickle.dumps(torch.Size([2, 3]), 2)
	v, err = pickle.Unmarshal([]byte("\x80\x02ctorch\nSize\nq\x00K\x02K\x03\x86q\x01\x85q\x02Rq\x03."), opts)
	fmt.Printf("%s %v %v\n", v.(*pickle.Object).Class, v.(*pickle.Object).Args, err)
	// Output:
	// [a] <nil>
	// torch.Size [[2 3]] <nil>
}

// Writing a snapshot-shaped value for Python (or memory_viz) to read.
func ExampleMarshal() {
	frames := []any{pickle.DictOf("filename", "train.py", "line", 12, "name", "step")}
	snap := map[string]any{
		"segments": []any{},
		"device_traces": []any{[]any{
			pickle.DictOf("action", "alloc", "addr", int64(0x7f0a3c000000), "size", 512, "stream", 0, "frames", frames),
			pickle.DictOf("action", "free_completed", "addr", int64(0x7f0a3c000000), "size", 512, "stream", 0, "frames", frames),
		}},
	}
	data, err := pickle.Marshal(snap, 4)
	if err != nil {
		fmt.Println(err)
		return
	}
	back, _ := pickle.Unmarshal(data, nil)
	fmt.Println(len(data), back.(*pickle.Dict).Keys())
	// Output: 216 [device_traces segments]
}
