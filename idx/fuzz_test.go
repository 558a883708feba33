package idx

import (
	"bytes"
	"errors"
	"testing"
)

func FuzzDecode(f *testing.F) {
	valid := cat(header(0x08, 2, 3), []byte{1, 2, 3, 4, 5, 6})
	f.Add(valid)
	f.Add(gz(f, valid))
	f.Add(cat(header(0x0D, 1), []byte{0x3f, 0x80, 0, 0}))
	f.Add(cat(header(0x0E, 2, 1), make([]byte, 16)))
	f.Add(header(0x0B, 0, 5))
	f.Add(header(0x0C, 0xffffffff, 0xffffffff))
	f.Add(gz(f, header(0x08, 1<<30)))
	f.Add(valid[:7])
	f.Add([]byte{0x1f, 0x8b})
	f.Fuzz(func(t *testing.T, in []byte) {
		file, err := Decode(bytes.NewReader(in), "fuzz")
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) || fe.File != "fuzz" {
				t.Fatalf("error %v is not a *FormatError naming the input", err)
			}
			return
		}
		if len(file.Data) != file.NumElements()*file.Type.Size() {
			t.Fatalf("len(Data) = %d for dims %v of %v", len(file.Data), file.Dims, file.Type)
		}
		_ = file.Float64s()
		var buf bytes.Buffer
		if err := Write(&buf, file); err != nil {
			t.Fatalf("Write of a decoded file: %v", err)
		}
		if len(in) >= 2 && in[0] == 0x1f && in[1] == 0x8b {
			return // compressed input: the decompressed bytes are what round-trip
		}
		if !bytes.Equal(buf.Bytes(), in) {
			t.Fatalf("round trip changed the file:\n in % x\nout % x", in, buf.Bytes())
		}
	})
}
