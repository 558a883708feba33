package tfevents

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The CRC-32C test vectors of RFC 3720 (iSCSI), appendix B.4, and the
// masking of TFRecords.
func TestCRC32C(t *testing.T) {
	ones, inc, dec := bytes.Repeat([]byte{0xff}, 32), make([]byte, 32), make([]byte, 32)
	for i := range 32 {
		inc[i], dec[i] = byte(i), byte(31-i)
	}
	for _, tt := range []struct {
		data []byte
		want uint32
	}{
		{make([]byte, 32), 0x8A9136AA},
		{ones, 0x62A8AB43},
		{inc, 0x46DD794E},
		{dec, 0x113FDB5C},
	} {
		c := tt.want
		if got, want := MaskedCRC(tt.data), (c>>15|c<<17)+0xa282ead8; got != want {
			t.Errorf("masked crc32c of % x...: %08x, want %08x", tt.data[:4], got, want)
		}
	}
}

type sample struct {
	Events []struct {
		WallTime    float64 `json:"wall_time"`
		Step        int64   `json:"step"`
		FileVersion string  `json:"file_version"`
		Values      [][2]any
	} `json:"events"`
}

func loadSample(t *testing.T) ([]Event, []byte) {
	t.Helper()
	js, err := os.ReadFile("testdata/sample.json")
	if err != nil {
		t.Fatal(err)
	}
	var s sample
	if err := json.Unmarshal(js, &s); err != nil {
		t.Fatal(err)
	}
	var events []Event
	for _, e := range s.Events {
		ev := Event{WallTime: e.WallTime, Step: e.Step, FileVersion: e.FileVersion}
		for _, v := range e.Values {
			ev.Values = append(ev.Values, Value{Tag: v[0].(string), Value: float32(v[1].(float64))})
		}
		events = append(events, ev)
	}
	data, err := os.ReadFile("testdata/sample.tfevents")
	if err != nil {
		t.Fatal(err)
	}
	return events, data
}

// The writer produces, byte for byte, the file that the protobuf library
// and crcmod wrote for the same events (scripts/reference/tfevents_ref.py),
// and the reader reads that file back to the same events.
func TestMatchesReferenceFile(t *testing.T) {
	events, want := loadSample(t)
	var buf bytes.Buffer
	for _, e := range events {
		buf.Write(AppendRecord(nil, e.Marshal()))
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Errorf("written file differs from the reference:\n got % x\nwant % x", buf.Bytes(), want)
	}
	got, err := Read(bytes.NewReader(want))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(events) {
		t.Fatalf("%d events read, want %d", len(got), len(events))
	}
	for i := range got {
		g, w := got[i], events[i]
		if g.WallTime != w.WallTime || g.Step != w.Step || g.FileVersion != w.FileVersion || len(g.Values) != len(w.Values) {
			t.Errorf("event %d: %+v, want %+v", i, g, w)
			continue
		}
		for j := range g.Values {
			if g.Values[j] != w.Values[j] {
				t.Errorf("event %d value %d: %+v, want %+v", i, j, g.Values[j], w.Values[j])
			}
		}
	}
}

// One event's encoding, field by field, as the protobuf encoding spec
// lays it out.
func TestMarshalByHand(t *testing.T) {
	e := Event{WallTime: 2, Step: 300, Values: []Value{{"a", 1}}}
	want := []byte{
		0x09, 0, 0, 0, 0, 0, 0, 0, 0x40, // field 1, fixed64: 2.0
		0x10, 0xac, 0x02, // field 2, varint: 300
		0x2a, 0x0a, // field 5, 10 bytes: Summary
		0x0a, 0x08, // field 1, 8 bytes: Value
		0x0a, 0x01, 'a', // field 1: tag "a"
		0x15, 0, 0, 0x80, 0x3f, // field 2, fixed32: 1.0f
	}
	if got := e.Marshal(); !bytes.Equal(got, want) {
		t.Errorf("got  % x\nwant % x", got, want)
	}
}

func TestCreateWriteRead(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tb")
	now := time.Unix(1700000000, 500_000_000)
	w, err := Create(dir, now)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(filepath.Base(w.Path()), "events.out.tfevents.1700000000.") {
		t.Errorf("file name %s", w.Path())
	}
	for s := int64(1); s <= 3; s++ {
		if err := w.Scalars(s, now.Add(time.Duration(s)*time.Second), Value{"loss", float32(1) / float32(s)}, Value{"lr", 0.1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(w.Path())
	defer f.Close()
	events, err := Read(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 4 || events[0].FileVersion != FileVersion || events[0].WallTime != 1700000000.5 {
		t.Fatalf("events %+v", events)
	}
	if e := events[3]; e.Step != 3 || e.WallTime != 1700000003.5 || e.Values[0] != (Value{"loss", float32(1) / 3}) || e.Values[1].Tag != "lr" {
		t.Errorf("last event %+v", e)
	}
}

// A file cut short returns the whole events before the cut; a flipped
// bit is a checksum error; a malformed message is an error, not a panic.
func TestReadDamaged(t *testing.T) {
	_, data := loadSample(t)
	events, err := Read(bytes.NewReader(data[:len(data)-3]))
	if !errors.Is(err, io.ErrUnexpectedEOF) || len(events) != 5 {
		t.Errorf("truncated: %d events, %v", len(events), err)
	}
	for _, at := range []int{3, 10, 20, len(data) - 2} {
		bad := bytes.Clone(data)
		bad[at] ^= 0x10
		if _, err := Read(bytes.NewReader(bad)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("bit flipped at %d: %v", at, err)
		}
	}
	for _, msg := range [][]byte{{0x09, 1, 2}, {0x2a, 0x05, 0x0a}, {0x0f}, {0x10, 0x80}, {0x00}} {
		if _, err := Read(bytes.NewReader(AppendRecord(nil, msg))); !errors.Is(err, ErrCorrupt) {
			t.Errorf("message % x: %v", msg, err)
		}
	}
}

func FuzzUnmarshal(f *testing.F) {
	f.Add([]byte{0x09, 0, 0, 0, 0, 0, 0, 0, 0x40, 0x2a, 0x02, 0x0a, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := Unmarshal(b)
		if err != nil {
			return
		}
		// What decodes re-encodes to something that decodes the same.
		e2, err := Unmarshal(e.Marshal())
		if err != nil || e2.Step != e.Step || len(e2.Values) != len(e.Values) ||
			math.Float64bits(e2.WallTime) != math.Float64bits(e.WallTime) && !(e.WallTime == 0 && e2.WallTime == 0) {
			t.Fatalf("%+v re-read as %+v (%v)", e, e2, err)
		}
	})
}
