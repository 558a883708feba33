// Package tfevents writes and reads TensorBoard event files
// (events.out.tfevents.*) with scalar summaries, using the standard
// library only.
//
// An event file is a sequence of TFRecords, each
//
//	uint64 length (little endian)
//	uint32 masked CRC-32C of the 8 length bytes
//	length bytes of data: a serialized tensorflow.Event protocol buffer
//	uint32 masked CRC-32C of the data
//
// where masking is ((crc >> 15) | (crc << 17)) + 0xa282ead8. The first
// record is an Event with file_version "brain.Event:2"; each later one
// carries a step, a wall time and a Summary of tagged float values. Only
// the fields needed for scalars are encoded (tensorflow/core/util/
// event.proto and tensorflow/core/framework/summary.proto):
//
//	Event   { double wall_time = 1; int64 step = 2;
//	          oneof what { string file_version = 3; Summary summary = 5; } }
//	Summary { repeated Value value = 1; }
//	Value   { string tag = 1; oneof value { float simple_value = 2; } }
//
// Fields are written in field-number order and proto3 defaults (a zero
// wall time or step) are left out, as the reference protobuf library does,
// so files are byte-for-byte what TensorFlow's writer would produce.
package tfevents

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"
)

// FileVersion is the version string of the first event of a file.
const FileVersion = "brain.Event:2"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// MaskedCRC is the masked CRC-32C of b that TFRecords store: a CRC of
// data that itself holds CRCs is masked so it is not trivially related.
func MaskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return (c>>15 | c<<17) + 0xa282ead8
}

// Value is one tagged scalar of a summary.
type Value struct {
	Tag   string
	Value float32
}

// Event is a decoded Event: the file-version event, or a summary of
// scalar values at a step.
type Event struct {
	WallTime    float64 // seconds since the Unix epoch
	Step        int64
	FileVersion string
	Values      []Value
}

// Marshal is the Event's protocol-buffer encoding.
func (e Event) Marshal() []byte {
	var b []byte
	if e.WallTime != 0 {
		b = binary.AppendUvarint(b, 1<<3|1) // fixed64
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(e.WallTime))
	}
	if e.Step != 0 {
		b = binary.AppendUvarint(b, 2<<3|0) // varint
		b = binary.AppendUvarint(b, uint64(e.Step))
	}
	if e.FileVersion != "" {
		b = appendBytes(b, 3, []byte(e.FileVersion))
	}
	if len(e.Values) > 0 {
		var sum []byte
		for _, v := range e.Values {
			var val []byte
			if v.Tag != "" {
				val = appendBytes(val, 1, []byte(v.Tag))
			}
			val = binary.AppendUvarint(val, 2<<3|5) // fixed32
			val = binary.LittleEndian.AppendUint32(val, math.Float32bits(v.Value))
			sum = appendBytes(sum, 1, val)
		}
		b = appendBytes(b, 5, sum)
	}
	return b
}

// appendBytes appends a length-delimited field.
func appendBytes(b []byte, field int, data []byte) []byte {
	b = binary.AppendUvarint(b, uint64(field)<<3|2)
	b = binary.AppendUvarint(b, uint64(len(data)))
	return append(b, data...)
}

// AppendRecord appends data framed as a TFRecord.
func AppendRecord(b, data []byte) []byte {
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(data)))
	b = append(b, n[:]...)
	b = binary.LittleEndian.AppendUint32(b, MaskedCRC(n[:]))
	b = append(b, data...)
	return binary.LittleEndian.AppendUint32(b, MaskedCRC(data))
}

// Writer writes events to an event file, one write per event, so that
// TensorBoard sees each step as soon as it is written.
type Writer struct {
	w    io.Writer
	f    *os.File // the file Create opened, closed by Close
	path string
}

// NewWriter writes events to w, starting with the file-version event at
// wall time now.
func NewWriter(w io.Writer, now time.Time) (*Writer, error) {
	ew := &Writer{w: w}
	if err := ew.Write(Event{WallTime: wallTime(now), FileVersion: FileVersion}); err != nil {
		return nil, err
	}
	return ew, nil
}

// Create makes dir if needed and a new event file in it, named as
// TensorFlow names them (events.out.tfevents.SECONDS.HOST), with the pid
// added so that two runs started in the same second do not collide.
func Create(dir string, now time.Time) (*Writer, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	path := filepath.Join(dir, fmt.Sprintf("events.out.tfevents.%010d.%s.%d", now.Unix(), host, os.Getpid()))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	w, err := NewWriter(f, now)
	if err != nil {
		f.Close()
		return nil, err
	}
	w.f, w.path = f, path
	return w, nil
}

// Path is the file Create made ("" for NewWriter).
func (w *Writer) Path() string { return w.path }

// Write writes one event.
func (w *Writer) Write(e Event) error {
	_, err := w.w.Write(AppendRecord(nil, e.Marshal()))
	return err
}

// Scalars writes the values as one event at step and wall time t.
func (w *Writer) Scalars(step int64, t time.Time, values ...Value) error {
	return w.Write(Event{WallTime: wallTime(t), Step: step, Values: values})
}

// Close closes the file Create opened.
func (w *Writer) Close() error {
	if w.f == nil {
		return nil
	}
	return w.f.Close()
}

func wallTime(t time.Time) float64 {
	return float64(t.UnixNano()) / 1e9
}

// ErrCorrupt is wrapped by errors for records whose checksums or
// encoding are wrong.
var ErrCorrupt = errors.New("tfevents: corrupt record")

// Read decodes every event of an event file. A file cut short in its last
// record (a writer still running, or killed) returns the events before it
// and io.ErrUnexpectedEOF.
func Read(r io.Reader) ([]Event, error) {
	var events []Event
	for i := 0; ; i++ {
		var head [12]byte
		if _, err := io.ReadFull(r, head[:]); err == io.EOF {
			return events, nil
		} else if err != nil {
			return events, io.ErrUnexpectedEOF
		}
		if got, want := binary.LittleEndian.Uint32(head[8:]), MaskedCRC(head[:8]); got != want {
			return events, fmt.Errorf("%w %d: length checksum %08x, want %08x", ErrCorrupt, i, got, want)
		}
		n := binary.LittleEndian.Uint64(head[:8])
		if n > 1<<30 {
			return events, fmt.Errorf("%w %d: length %d", ErrCorrupt, i, n)
		}
		data := make([]byte, n+4)
		if _, err := io.ReadFull(r, data); err != nil {
			return events, io.ErrUnexpectedEOF
		}
		if got, want := binary.LittleEndian.Uint32(data[n:]), MaskedCRC(data[:n]); got != want {
			return events, fmt.Errorf("%w %d: data checksum %08x, want %08x", ErrCorrupt, i, got, want)
		}
		e, err := Unmarshal(data[:n])
		if err != nil {
			return events, fmt.Errorf("record %d: %w", i, err)
		}
		events = append(events, e)
	}
}

// Unmarshal decodes an Event, skipping fields it does not know (graphs,
// images, histograms) as protocol-buffer readers do.
func Unmarshal(b []byte) (Event, error) {
	var e Event
	err := fields(b, func(num int, wire int, v uint64, data []byte) error {
		switch {
		case num == 1 && wire == 1:
			e.WallTime = math.Float64frombits(v)
		case num == 2 && wire == 0:
			e.Step = int64(v)
		case num == 3 && wire == 2:
			e.FileVersion = string(data)
		case num == 5 && wire == 2:
			return fields(data, func(num, wire int, _ uint64, data []byte) error {
				if num != 1 || wire != 2 {
					return nil
				}
				var val Value
				var simple bool
				err := fields(data, func(num, wire int, v uint64, data []byte) error {
					switch {
					case num == 1 && wire == 2:
						val.Tag = string(data)
					case num == 2 && wire == 5:
						val.Value, simple = math.Float32frombits(uint32(v)), true
					}
					return nil
				})
				if simple {
					e.Values = append(e.Values, val)
				}
				return err
			})
		}
		return nil
	})
	return e, err
}

// fields calls f for each field of the message b: v holds a varint or
// fixed-width value, data a length-delimited one.
func fields(b []byte, f func(num, wire int, v uint64, data []byte) error) error {
	for len(b) > 0 {
		key, n := binary.Uvarint(b)
		if n <= 0 {
			return fmt.Errorf("%w: bad field key", ErrCorrupt)
		}
		b = b[n:]
		num, wire := int(key>>3), int(key&7)
		var v uint64
		var data []byte
		switch wire {
		case 0:
			v, n = binary.Uvarint(b)
			if n <= 0 {
				return fmt.Errorf("%w: bad varint in field %d", ErrCorrupt, num)
			}
			b = b[n:]
		case 1:
			if len(b) < 8 {
				return fmt.Errorf("%w: short fixed64 field %d", ErrCorrupt, num)
			}
			v, b = binary.LittleEndian.Uint64(b), b[8:]
		case 5:
			if len(b) < 4 {
				return fmt.Errorf("%w: short fixed32 field %d", ErrCorrupt, num)
			}
			v, b = uint64(binary.LittleEndian.Uint32(b)), b[4:]
		case 2:
			l, n := binary.Uvarint(b)
			if n <= 0 || l > uint64(len(b)-n) {
				return fmt.Errorf("%w: bad length of field %d", ErrCorrupt, num)
			}
			data, b = b[n:n+int(l)], b[n+int(l):]
		default:
			return fmt.Errorf("%w: wire type %d of field %d", ErrCorrupt, wire, num)
		}
		if num == 0 {
			return fmt.Errorf("%w: field number 0", ErrCorrupt)
		}
		if err := f(num, wire, v, data); err != nil {
			return err
		}
	}
	return nil
}
