package pickle

import (
	"errors"
	"strconv"
)

// Sentinel errors. Every error Unmarshal and Decoder.Decode return is an
// *Error wrapping exactly one of these, so callers can branch with
// errors.Is and still print a message that says what and where.
var (
	// ErrTruncated: the data ends inside an opcode or before STOP.
	ErrTruncated = errors.New("truncated")
	// ErrOpcode: a byte that is not a pickle opcode, or a protocol above 5.
	ErrOpcode = errors.New("bad opcode")
	// ErrSyntax: a malformed opcode argument (a text integer that is not
	// one, an unquoted STRING, a bad escape, a negative length).
	ErrSyntax = errors.New("bad argument")
	// ErrStack: an opcode found too few items on the stack, or no MARK
	// where it needs one.
	ErrStack = errors.New("stack underflow")
	// ErrMemo: GET of a memo slot that was never PUT, or a PUT with
	// nothing to store.
	ErrMemo = errors.New("bad memo use")
	// ErrType: an opcode applied to a value of the wrong kind (APPEND to
	// a dict, a list as a dict key, REDUCE of something not a class).
	ErrType = errors.New("wrong type")
	// ErrNotAllowed: GLOBAL, STACK_GLOBAL or INST named a class that is
	// neither a built-in plain-value constructor nor in Options.Allow. The
	// *Error wraps a *ClassError, which names the class.
	ErrNotAllowed = errors.New("class not allowed")
	// ErrUnsupported: a feature this reader does not provide (extension
	// codes, persistent ids without Options.PersistentLoad, out-of-band
	// buffers without Options.Buffers, BUILD on a value without state).
	ErrUnsupported = errors.New("unsupported")
	// ErrLimit: the input exceeds one of Options' limits (depth, elements,
	// bytes).
	ErrLimit = errors.New("limit exceeded")
	// ErrRecursive: the pickle builds a container that contains itself.
	// Python allows that; this package does not, so that callers can walk
	// decoded values recursively.
	ErrRecursive = errors.New("recursive structure")
	// ErrConstructor: a constructor from Options.Allow (or Options'
	// PersistentLoad) returned an error; the *Error wraps it too.
	ErrConstructor = errors.New("constructor failed")
)

// Error is the error of a pickle that cannot be decoded.
type Error struct {
	Offset int64  // byte offset of the failing opcode in the input
	Op     string // the opcode's name ("GLOBAL"), or "" at end of data
	Msg    string // what is wrong, with the numbers involved (and Cause's text)
	Err    error  // one of the sentinels above
	Cause  error  // a *ClassError, the constructor's error, or nil
}

func (e *Error) Error() string {
	return "pickle: offset " + strconv.FormatInt(e.Offset, 10) + ": " + e.Msg
}

// Unwrap gives the sentinel and the cause, so that errors.Is(err,
// ErrNotAllowed) and errors.As(err, &classErr) both work.
func (e *Error) Unwrap() []error {
	if e.Cause != nil {
		return []error{e.Err, e.Cause}
	}
	return []error{e.Err}
}

// ClassError names a class a pickle asked for that is not allowed.
type ClassError struct {
	Module, Name string
}

func (e *ClassError) Error() string {
	return "class " + e.Module + "." + e.Name + " is not allowed"
}

// Is reports that a ClassError is an ErrNotAllowed.
func (e *ClassError) Is(target error) bool { return target == ErrNotAllowed }

// EncodeError is the error of a value that cannot be pickled.
type EncodeError struct {
	Path string // where in the value: "$", "$[3]", `$["segments"][0]`
	Msg  string
	Err  error // ErrUnsupported, ErrLimit or ErrType
}

func (e *EncodeError) Error() string {
	return "pickle: encode " + e.Path + ": " + e.Msg
}

// Unwrap returns the sentinel.
func (e *EncodeError) Unwrap() error { return e.Err }
