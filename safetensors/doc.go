// Package safetensors reads and writes Hugging Face safetensors files, the
// format headroom uses for checkpoints and for reference data produced by
// PyTorch.
//
// A file is an 8-byte little-endian header length N, N bytes of JSON mapping
// each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (plus
// an optional "__metadata__" string-to-string map), and then the data buffer,
// in which every tensor's little-endian, row-major bytes lie at [begin, end).
//
// Reading is strict: a file is accepted only if the tensors exactly tile the
// data buffer and every size agrees with its shape and dtype, because a
// checkpoint that is silently misread is worse than one that fails to load.
// Failures are *FormatError values that name the file, the tensor, the byte
// offset and the numbers involved, and wrap a sentinel (ErrTruncated, ErrSize,
// ...) for errors.Is.
//
// Writing is deterministic and byte-identical to the reference
// implementation's: tensors ordered by descending alignment and then by name,
// the header padded with spaces to a multiple of 8 bytes.
package safetensors
