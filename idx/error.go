package idx

import "fmt"

// FormatError reports a malformed IDX file.
type FormatError struct {
	// File is the name given to Decode or the path given to ReadFile.
	File string
	// Offset is the byte offset of the problem. For gzip-compressed input
	// it counts decompressed bytes, since that is where IDX structure lives;
	// Gzip says which.
	Offset int64
	// Gzip is set when the input was gzip-compressed.
	Gzip bool
	// Reason says what is wrong, with the numbers involved.
	Reason string
	// Err is an underlying error (an I/O or decompression failure), if any.
	Err error
}

func (e *FormatError) Error() string {
	where := fmt.Sprintf("offset %d", e.Offset)
	if e.Gzip {
		where = fmt.Sprintf("offset %d of decompressed data", e.Offset)
	}
	s := fmt.Sprintf("idx: %s: %s: %s", e.File, where, e.Reason)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the underlying error, so that errors.Is sees, for example,
// gzip.ErrChecksum.
func (e *FormatError) Unwrap() error { return e.Err }
