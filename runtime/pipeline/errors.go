package pipeline

import "errors"

// ErrUnknownCompression: the compression header names no codec this
// collector reads.
var ErrUnknownCompression = errors.New("unknown compression")

// ErrDecompressedTooLarge: the body inflates past the body limit (a
// compression bomb, or a notification larger than any real one).
var ErrDecompressedTooLarge = errors.New("decompressed body over the limit")

// ErrDecoderLimit: the body's header asks its decoder for more memory than
// the codec's cap (a dictionary, a window, a block count): refused before
// any buffer is sized.
var ErrDecoderLimit = errors.New("compressed body over the decoder's memory cap")

// Errors of the .xz container reader, wrapped in the errors it returns.
var (
	errXZFormat   = errors.New("not a valid .xz stream")
	errXZChecksum = errors.New("block check mismatch")
)
