// Package pickle reads and writes Python pickles of plain data, safely.
//
// It exists for memory snapshots: PyTorch's torch.cuda.memory._dump_snapshot
// writes a pickle (a dict of lists of dicts), PyTorch's memory_viz page reads
// one, and headroom both reads PyTorch's and writes its own.
//
// # Reading
//
// Unmarshal (or a Decoder, for a stream) runs the pickle machine of
// protocols 0 to 5 and builds Go values:
//
//	None            nil
//	bool            bool
//	int             int64, or *big.Int outside the int64 range
//	float           float64
//	str             string (Python 2 str: its raw bytes)
//	bytes,
//	  bytearray     []byte
//	list            []any
//	tuple           Tuple
//	dict            *Dict (ordered, with typed getters such as GetInt)
//	set, frozenset  *Set
//
// Sharing is kept: an object the pickle refers to twice (through the memo)
// is one Go value, so a snapshot whose frames lists are shared decodes to
// shared slices, and encodes back to the same bytes.
//
// Large pickles: UnmarshalReader decodes a stream of known length;
// ScanMemo finds, in a first pass that builds nothing, which memo slots
// the pickle reads back, and with it (Options.Refs) the decoder keeps only
// those, where Python's pickler memoizes every container; Options.Replace
// turns the dicts of a long list into the caller's values as they are
// appended. Together they read a history of millions of entries in memory
// proportional to the caller's values, not to the generic tree.
//
// The reader never executes anything. A pickle names code with GLOBAL,
// STACK_GLOBAL and INST and runs it with REDUCE, NEWOBJ, NEWOBJ_EX, OBJ, INST
// and BUILD; here a name is accepted only if the caller lists it in
// Options.Allow with a Go Constructor to stand in for the call, or if it is
// one of the few built-ins protocols 0 to 3 use to spell plain values (set,
// frozenset, bytes, bytearray, _codecs.encode), which build plain values and
// nothing else. Any other name fails at the opcode that names it, before
// anything could use it:
//
//	pickle: offset 0: class os.system is not allowed
//
// Persistent ids and out-of-band buffers are likewise refused unless Options
// provides for them, and extension codes are refused always.
//
// Hostile input is bounded: Options limits nesting depth, the number of
// values and the bytes of payload (and of key hashing), by default in
// proportion to the input's length (Unmarshal), reads of declared
// lengths grow with the data actually present, shared structures are never
// expanded, and containers that contain themselves are rejected
// (ErrRecursive) so that callers can walk results recursively. Every error
// is an *Error with the byte offset of the failing opcode, wrapping one of
// the sentinel errors (ErrTruncated, ErrNotAllowed, ErrLimit, ...). The
// reader is fuzzed (FuzzUnpickle).
//
// # Writing
//
// Marshal (or an Encoder) writes the same plain values, and also Go's ints,
// floats, named types, typed slices and maps with string or integer keys
// (in sorted key order), in protocol 2, 3, 4 or 5. It follows CPython's
// pickler opcode for opcode, framing and memo numbering included, so its
// output is what pickle.dumps writes for the same Python value; the tests
// check this byte for byte against Python's files, and
// scripts/reference/pickle_ref.py --check checks, with Python, that Python
// reads what Go wrote and pickles it back to the same bytes. Protocol 4 is
// what the memory_viz page reads (it takes protocols 2 to 4 and the opcodes
// of plain dicts, lists, tuples, strings and numbers). The writer never
// writes classes.
//
// # Test data
//
// testdata holds pickles written by Python (scripts/reference/pickle_ref.py,
// run with /usr/bin/python3) and by this package (go test -run TestGoWritten
// -update); see ref_test.go.
package pickle
