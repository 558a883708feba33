package pickle

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// escapeDecode decodes the body of a protocol 0 STRING argument, as
// Python's codecs.escape_decode does: \\ \' \" \a \b \f \n \r \t \v, up
// to three octal digits, \xhh, backslash-newline (dropped); any other
// backslash stays. The result holds the raw bytes (Python 2's str).
func escapeDecode(b []byte) (string, error) {
	if !strings.ContainsRune(string(b), '\\') {
		return string(b), nil
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		i++
		if i >= len(b) {
			return "", errors.New("trailing \\ in string")
		}
		switch c = b[i]; c {
		case '\n':
		case '\\', '\'', '"':
			out = append(out, c)
		case 'a':
			out = append(out, 7)
		case 'b':
			out = append(out, 8)
		case 'f':
			out = append(out, 12)
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'v':
			out = append(out, 11)
		case '0', '1', '2', '3', '4', '5', '6', '7':
			v := int(c - '0')
			for k := 0; k < 2 && i+1 < len(b) && b[i+1] >= '0' && b[i+1] <= '7'; k++ {
				i++
				v = v*8 + int(b[i]-'0')
			}
			out = append(out, byte(v))
		case 'x':
			if i+2 >= len(b) {
				return "", fmt.Errorf("invalid \\x escape at position %d", i-1)
			}
			hi, ok1 := unhex(b[i+1])
			lo, ok2 := unhex(b[i+2])
			if !ok1 || !ok2 {
				return "", fmt.Errorf("invalid \\x escape at position %d", i-1)
			}
			out = append(out, hi<<4|lo)
			i += 2
		default:
			out = append(out, '\\', c)
		}
	}
	return string(out), nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// rawUnicodeEscapeDecode decodes a protocol 0 UNICODE argument, as Python's
// "raw-unicode-escape" codec does: bytes are Latin-1 characters, except
// \uXXXX and \UXXXXXXXX after an odd number of backslashes. Lone
// surrogates are kept in the encoded form Python's surrogatepass uses.
func rawUnicodeEscapeDecode(b []byte) (string, error) {
	var out strings.Builder
	out.Grow(len(b))
	for i := 0; i < len(b); {
		c := b[i]
		if c != '\\' {
			writeRune(&out, rune(c))
			i++
			continue
		}
		start := i
		for i < len(b) && b[i] == '\\' {
			i++
		}
		n := i - start
		for range n - 1 {
			out.WriteByte('\\')
		}
		if n%2 == 0 || i >= len(b) || (b[i] != 'u' && b[i] != 'U') {
			out.WriteByte('\\')
			continue
		}
		count := 4
		if b[i] == 'U' {
			count = 8
		}
		i++
		if i+count > len(b) {
			return "", fmt.Errorf("truncated \\%cXXXX escape at position %d", b[i-1], i-2)
		}
		var r rune
		for k := 0; k < count; k++ {
			h, ok := unhex(b[i+k])
			if !ok {
				return "", fmt.Errorf("truncated \\%cXXXX escape at position %d", b[i-1], i-2)
			}
			r = r<<4 | rune(h)
		}
		if r > utf8.MaxRune || r < 0 {
			return "", fmt.Errorf("\\U%08x at position %d is not a Unicode code point", r, i-2)
		}
		i += count
		writeRune(&out, r)
	}
	return out.String(), nil
}

// writeRune writes r as UTF-8, and a surrogate as Python's surrogatepass
// encodes it.
func writeRune(w *strings.Builder, r rune) {
	if r >= 0xD800 && r <= 0xDFFF {
		w.WriteByte(byte(0xE0 | r>>12))
		w.WriteByte(byte(0x80 | (r>>6)&0x3F))
		w.WriteByte(byte(0x80 | r&0x3F))
		return
	}
	w.WriteRune(r)
}
