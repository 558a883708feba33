package safetensors

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/bits"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/headroom-ml/headroom/internal/safefile"
	"github.com/headroom-ml/headroom/tensor"
)

// WriteFile writes tensors and metadata to path. The file is written to a
// temporary file in the same directory, synced and renamed over path, so a
// crash leaves either the old file or the complete new one, never a torn
// checkpoint. The new file has mode 0644.
func WriteFile(path string, tensors map[string]*tensor.Tensor, metadata map[string]string) error {
	// Validate before touching the file system, so bad input leaves no
	// temporary file behind.
	hdr, order, err := prepare(path, tensors, metadata)
	if err != nil {
		return err
	}
	if err := safefile.Write(path, 0o644, func(w io.Writer) error { return writeTo(w, hdr, order) }); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	return nil
}

// Write writes tensors and metadata to w in safetensors format. Empty or nil
// metadata writes no "__metadata__" entry.
func Write(w io.Writer, tensors map[string]*tensor.Tensor, metadata map[string]string) error {
	hdr, order, err := prepare("", tensors, metadata)
	if err != nil {
		return err
	}
	if err := writeTo(w, hdr, order); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	return nil
}

func writeTo(w io.Writer, hdr []byte, order []*tensor.Tensor) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	var prefix [8]byte
	binary.LittleEndian.PutUint64(prefix[:], uint64(len(hdr)))
	bw.Write(prefix[:])
	bw.Write(hdr)
	for _, t := range order {
		data := t.Data
		if !hostLittleEndian {
			data = slices.Clone(data)
			swapElements(data, t.DType.Size())
		}
		if _, err := bw.Write(data); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// prepare validates the input and builds the padded header and the tensors
// in data order. file is used only in error messages.
func prepare(file string, tensors map[string]*tensor.Tensor, metadata map[string]string) ([]byte, []*tensor.Tensor, error) {
	bad := func(name string, sentinel error, format string, args ...any) error {
		return &FormatError{File: file, Tensor: name, Offset: -1, Reason: fmt.Sprintf(format, args...), Err: sentinel}
	}
	names := make([]string, 0, len(tensors))
	for name, t := range tensors {
		switch {
		case name == metadataKey:
			return nil, nil, bad(name, ErrHeader, "name is reserved for the metadata map")
		case !utf8.ValidString(name):
			return nil, nil, bad(name, ErrHeader, "name is not valid UTF-8")
		case t == nil:
			return nil, nil, bad(name, ErrData, "tensor is nil")
		}
		if _, ok := codes[t.DType]; !ok {
			return nil, nil, bad(name, ErrDType, "dtype %v cannot be stored (supported: %s)", t.DType, supportedCodes)
		}
		elems := uint64(1)
		for _, d := range t.Shape {
			if d < 0 {
				return nil, nil, bad(name, ErrShape, "shape %v has a negative dimension", t.Shape)
			}
			hi, lo := bits.Mul64(elems, uint64(d))
			if hi != 0 || lo > math.MaxInt {
				return nil, nil, bad(name, ErrShape, "shape %v has more elements than fit in an int", t.Shape)
			}
			elems = lo
		}
		if want := elems * uint64(t.DType.Size()); uint64(len(t.Data)) != want {
			return nil, nil, bad(name, ErrSize, "data is %d bytes, but shape %v of %v needs %d", len(t.Data), t.Shape, t.DType, want)
		}
		if t.DType == tensor.Bool {
			for i, b := range t.Data {
				if b > 1 {
					return nil, nil, bad(name, ErrData, "bool element %d has byte value %d (want 0 or 1)", i, b)
				}
			}
		}
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int {
		ra, rb := codes[tensors[a].DType].rank, codes[tensors[b].DType].rank
		if ra != rb {
			return rb - ra // descending alignment
		}
		return strings.Compare(a, b)
	})

	keys := make([]string, 0, len(metadata))
	for k, v := range metadata {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return nil, nil, bad("", ErrHeader, "metadata entry %q is not valid UTF-8", k)
		}
		keys = append(keys, k)
	}
	// The reference writer's metadata order is its hash map's; sorting makes
	// ours deterministic.
	sort.Strings(keys)

	// Compact JSON in the reference implementation's key order, written by
	// hand because encoding/json would reorder keys and escape <, > and &.
	hdr := []byte{'{'}
	if len(keys) > 0 {
		hdr = appendJSONString(hdr, metadataKey)
		hdr = append(hdr, ":{"...)
		for i, k := range keys {
			if i > 0 {
				hdr = append(hdr, ',')
			}
			hdr = appendJSONString(hdr, k)
			hdr = append(hdr, ':')
			hdr = appendJSONString(hdr, metadata[k])
		}
		hdr = append(hdr, '}')
		if len(names) > 0 {
			hdr = append(hdr, ',')
		}
	}
	order := make([]*tensor.Tensor, len(names))
	var offset uint64
	for i, name := range names {
		t := tensors[name]
		order[i] = t
		if i > 0 {
			hdr = append(hdr, ',')
		}
		hdr = appendJSONString(hdr, name)
		hdr = append(hdr, `:{"dtype":"`...)
		hdr = append(hdr, codes[t.DType].code...)
		hdr = append(hdr, `","shape":[`...)
		for j, d := range t.Shape {
			if j > 0 {
				hdr = append(hdr, ',')
			}
			hdr = strconv.AppendInt(hdr, int64(d), 10)
		}
		hdr = append(hdr, `],"data_offsets":[`...)
		hdr = strconv.AppendUint(hdr, offset, 10)
		hdr = append(hdr, ',')
		offset += uint64(len(t.Data))
		hdr = strconv.AppendUint(hdr, offset, 10)
		hdr = append(hdr, "]}"...)
	}
	hdr = append(hdr, '}')
	// Pad with spaces so the data buffer starts 8-byte aligned, as the
	// reference writer does; JSON readers skip the trailing whitespace.
	for len(hdr)%8 != 0 {
		hdr = append(hdr, ' ')
	}
	if len(hdr) > MaxHeaderSize {
		return nil, nil, bad("", ErrHeaderTooLarge, "header would be %d bytes, over the limit of %d that readers accept", len(hdr), MaxHeaderSize)
	}
	return hdr, order, nil
}

// appendJSONString appends s as a JSON string escaped exactly as serde_json
// and Python's json.dumps(ensure_ascii=False) do: only '"', '\\' and control
// characters, with \b \t \n \f \r short forms. s must be valid UTF-8.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\b':
			b = append(b, `\b`...)
		case c == '\t':
			b = append(b, `\t`...)
		case c == '\n':
			b = append(b, `\n`...)
		case c == '\f':
			b = append(b, `\f`...)
		case c == '\r':
			b = append(b, `\r`...)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
