package memviz_test

import (
	"reflect"
	"testing"

	"github.com/headroom-ml/headroom/memviz"
	"github.com/headroom-ml/headroom/memviz/internal/pickle"
)

// History entries are read into Events while the pickle is decoded; what
// that reading cannot know yet or cannot handle still reads as the plain
// way reads it: a "headroom" key after the history (its entries' "unknown"
// category is none, their frames made from module and op), and an entry
// shared through the memo between two devices' histories.
func TestDecodeStreamingMatchesPlain(t *testing.T) {
	alloc := func() *pickle.Dict {
		return pickle.DictOf("action", "alloc", "addr", int64(4096), "size", int64(512),
			"category", "unknown", "module", "layers.0", "op", "conv2d")
	}
	shared := alloc()
	for _, tc := range []struct {
		name  string
		top   *pickle.Dict
		check func(t *testing.T, s *memviz.Snapshot)
	}{
		{"headroom key last", pickle.DictOf("segments", []any{}, "device_traces", []any{[]any{alloc()}},
			"headroom", pickle.DictOf("version", int64(1), "device", "cpu")),
			func(t *testing.T, s *memviz.Snapshot) {
				if s.Source != memviz.SourceHeadroom || len(s.Traces) != 1 || len(s.Traces[0]) != 1 {
					t.Fatalf("source %v, traces %v", s.Source, s.Traces)
				}
				e := s.Traces[0][0]
				if e.Category != "" || len(e.Frames) == 0 {
					t.Errorf("category %q, frames %v: want none and headroom's frames", e.Category, e.Frames)
				}
			}},
		{"entry shared between devices", pickle.DictOf("segments", []any{}, "device_traces", []any{[]any{shared}, []any{shared}}),
			func(t *testing.T, s *memviz.Snapshot) {
				if len(s.Traces) != 2 || len(s.Traces[0]) != 1 || !reflect.DeepEqual(s.Traces[0], s.Traces[1]) {
					t.Fatalf("traces %+v: want the same entry on both devices", s.Traces)
				}
				if e := s.Traces[1][0]; e.Addr != 4096 || e.Size != 512 || e.Category != "unknown" {
					t.Errorf("entry %+v", e)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := pickle.Marshal(tc.top, 4)
			if err != nil {
				t.Fatal(err)
			}
			s, err := memviz.Decode(tc.name+".pickle", data)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, s)
		})
	}
}
