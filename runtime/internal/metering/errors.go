package metering

import "errors"

var (
	// ErrUnsupported is wrapped by the error of a module the pass refuses to
	// meter (an *UnsupportedError says which instruction and where).
	ErrUnsupported = errors.New("cannot meter module")
	// errTruncated is what every read past the end of the input wraps.
	errTruncated = errors.New("unexpected end")
)
