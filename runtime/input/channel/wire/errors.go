package wire

import "errors"

var (
	// ErrFrameTooLarge: a frame's length field exceeds the reader's bound.
	ErrFrameTooLarge = errors.New("channel wire: frame too large")
	// ErrVersion: a frame of a version this codec does not speak.
	ErrVersion = errors.New("channel wire: unsupported version")
	// ErrMalformed: a frame shorter than its fields, or a field out of range.
	ErrMalformed = errors.New("channel wire: malformed frame")
)
